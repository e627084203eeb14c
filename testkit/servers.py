"""Start the real webhook server (gunicorn) on a free loopback port, and stop it by PID."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from socketserver import BaseServer

import requests

from .processes import free_port, poll_until, stop_group
from .support import OTHER_SECRET, SECRET, TOKEN

__all__ = ["free_port", "serving_in_thread", "wait_ready", "webhook_server"]


def wait_ready(
    url: str, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll ``url`` until it answers 200; fail at once if ``proc`` exits meanwhile."""

    def answers() -> bool:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            return requests.get(url, timeout=1).status_code == 200
        except requests.RequestException:
            return False

    poll_until(answers, f"{url} to answer 200", timeout)


@contextmanager
def webhook_server(
    redis_url: str,
    tmp: Path,
    workers: int | None = 2,
    config: Path | None = None,
    **env: str,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run ``fivetran-events serve`` in its own process group; yield (base URL, process).

    ``workers``: None for serve's default. ``config``: a gunicorn configuration file
    (``serve --config``), e.g. deploy's.
    Forwarding is on (an Airflow URL nothing listens on: the web process never calls it),
    so each success queues its job as in production; pass
    ``FIVETRAN_EVENTS_AIRFLOW_URL=""`` to turn it off.
    """
    port = free_port()
    environ = {
        **os.environ,
        "FIVETRAN_EVENTS_REDIS_URL": redis_url,
        "FIVETRAN_EVENTS_WEBHOOK_SECRETS": f"{SECRET},{OTHER_SECRET}",
        "FIVETRAN_EVENTS_API_TOKENS": TOKEN,
        "FIVETRAN_EVENTS_KEY_PREFIX": "test:",
        # Forwarding on, as in the ``settings`` fixture: the web process creates deliveries
        # and jobs only then, and never calls Airflow itself, so the URL need not answer.
        "FIVETRAN_EVENTS_AIRFLOW_URL": "http://127.0.0.1:9",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp),
        **env,
    }
    log = (tmp / f"gunicorn-{port}.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "webhook_app",
            "serve",
            "--port",
            str(port),
            *(["--workers", str(workers)] if workers else []),
            *(["--config", str(config)] if config else []),
        ],
        env=environ,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base + "/readyz", proc=proc)
        yield base, proc
    finally:
        stop_group(proc, timeout=15)
        log.close()


@contextmanager
def serving_in_thread(server: BaseServer) -> Iterator[BaseServer]:
    """Serve a bound in-process server (a stand-in) from a thread; shut it down after."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
