"""Slow clients do not stall the server as users run it (``fivetran-events serve`` with
its defaults, and deploy/gunicorn.conf.py): connections that sent their headers and half
a body hold no worker that a signed delivery or ``/healthz`` needs.

Real sockets on 127.0.0.1; every wait is bounded by the sockets' timeouts.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testkit.servers import webhook_server
from testkit.support import WEBHOOK_PATH, payload, signed

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).resolve().parents[3] / "deploy" / "gunicorn.conf.py"
#: The issue's figure: this many connections hold half-sent bodies.
SLOW_CLIENTS = 16
#: A signed delivery and /healthz must be answered within this many seconds meanwhile.
ANSWER_WITHIN_S = 2.0


@contextlib.contextmanager
def half_sent_bodies(port: int, count: int) -> Iterator[list[socket.socket]]:
    """Open ``count`` connections that send a POST's headers and half its body, then
    nothing; close them on exit."""
    raw, headers = signed(payload(sync_id="s-slow"))
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (
        f"POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}"
        f"Content-Length: {len(raw)}\r\n\r\n"
    ).encode() + raw[: len(raw) // 2]
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(request)
            socks.append(sock)
        yield socks
    finally:
        for sock in socks:
            sock.close()


@pytest.mark.parametrize("config", [None, CONFIG], ids=["serve-defaults", "deploy-config"])
def test_half_sent_bodies_stall_neither_a_delivery_nor_healthz(
    redis_url: str, tmp_path: Path, config: Path | None
) -> None:
    """With 16 connections holding half-sent bodies, a signed sync_end is recorded and
    /healthz answers, each within 2 s. No gunicorn control socket is made where gunicorn
    would put it (the user's runtime folder)."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    with webhook_server(
        redis_url, tmp_path, workers=None, config=config, XDG_RUNTIME_DIR=str(runtime)
    ) as (base, _):
        assert list(runtime.iterdir()) == []
        port = int(base.rsplit(":", 1)[1])
        with half_sent_bodies(port, SLOW_CLIENTS):
            raw, headers = signed(payload(sync_id="s-fast"))
            started = time.monotonic()
            answer = requests.post(
                base + WEBHOOK_PATH, data=raw, headers=headers, timeout=ANSWER_WITHIN_S
            )
            took = time.monotonic() - started
            assert (answer.status_code, answer.json()["status"]) == (200, "recorded")
            assert took < ANSWER_WITHIN_S, took
            health = requests.get(base + "/healthz", timeout=ANSWER_WITHIN_S)
            assert health.status_code == 200
