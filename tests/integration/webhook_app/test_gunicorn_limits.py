"""The body limit under real gunicorn: 413 however the body arrives, chunked included.

A chunked request has no Content-Length, so nothing can refuse it up front: the
limit must be enforced while reading. Sent over a raw socket, as a client that
streams its body would, to the server as production runs it (deploy/gunicorn.conf.py).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from pytest_redis.executor import RedisExecutor

from fivetran_events import Settings
from fivetran_events.model import SIGNATURE_HEADER
from testkit.servers import webhook_server
from testkit.support import payload, signed

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).resolve().parents[3] / "deploy" / "gunicorn.conf.py"
LIMIT = Settings.model_fields["max_body_bytes"].default


def body_of(size: int, sync_id: str) -> bytes:
    """A signed-able sync_end padded to exactly ``size`` bytes."""
    base = {**payload(sync_id=sync_id), "pad": ""}
    pad = size - len(json.dumps(base).encode())
    assert pad >= 0
    raw = json.dumps({**base, "pad": "x" * pad}).encode()
    assert len(raw) == size
    return raw


def chunks(raw: bytes, size: int = 16 * 1024) -> bytes:
    """``raw`` in HTTP/1.1 chunked framing."""
    out = b"".join(
        f"{len(raw[i : i + size]):x}\r\n".encode() + raw[i : i + size] + b"\r\n"
        for i in range(0, len(raw), size)
    )
    return out + b"0\r\n\r\n"


def post(
    port: int, raw: bytes, chunked: bool, wire: bytes | None = None
) -> tuple[int, dict[str, Any]]:
    """POST ``raw`` signed over a raw socket, chunked or with Content-Length; ``wire``
    replaces the body's bytes as sent."""
    _, headers = signed(raw)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(raw)}"
    head = (
        f"POST /webhooks/fivetran HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\n{SIGNATURE_HEADER}: "
        f"{headers[SIGNATURE_HEADER]}\r\n{framing}\r\nConnection: close\r\n\r\n"
    )
    if wire is None:
        wire = chunks(raw) if chunked else raw
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        with contextlib.suppress(OSError):  # the server may answer before the body ends
            sock.sendall(head.encode() + wire)
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        return resp.status, json.loads(resp.read())


@pytest.fixture(scope="module")
def gunicorn_port(
    redis_proc: RedisExecutor, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    url = f"redis://{redis_proc.host}:{redis_proc.port}/0"
    with webhook_server(url, tmp_path_factory.mktemp("gunicorn"), config=CONFIG) as (base, _):
        yield int(base.rsplit(":", 1)[1])


@pytest.mark.parametrize("over", [1, 3 * LIMIT], ids=["one-byte-over", "four-times"])
def test_over_limit_is_413_however_framed(
    gunicorn_port: int, client: redis.Redis, over: int
) -> None:
    """A correctly signed body over the limit is 413 chunked as with Content-Length (chunked
    it used to be cut at the limit and then fail its signature: 401) and records nothing;
    a chunked body of exactly the limit is read whole and recorded."""
    for chunked in (True, False):
        status, answer = post(gunicorn_port, body_of(LIMIT + over, "s-big"), chunked)
        assert (status, answer["status"]) == (413, "error"), (chunked, answer)
        assert str(LIMIT) in answer["error"]
    assert client.keys("test:h:*") == []
    status, answer = post(gunicorn_port, body_of(LIMIT, "s-limit"), chunked=True)
    assert (status, answer["status"]) == (200, "recorded"), answer
    assert client.zcard("test:h:assimilate_seem:ok") == 1


def test_broken_chunked_framing_is_400(gunicorn_port: int, client: redis.Redis) -> None:
    """A chunk size that is not hex is the client's fault: 400 naming the body, not 500."""
    raw = body_of(1000, "s-broken")
    status, answer = post(gunicorn_port, raw, chunked=True, wire=b"zz\r\n" + raw + b"\r\n")
    assert (status, answer.get("field")) == (400, "body"), answer
    assert client.keys("test:h:*") == []
