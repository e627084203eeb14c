"""Start the real webhook server (gunicorn) on a free loopback port, and stop it by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from socketserver import BaseServer

import requests

from .support import OTHER_SECRET, SECRET, TOKEN


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready within {timeout}s")


@contextmanager
def webhook_server(
    redis_url: str, tmp: Path, workers: int = 2, config: Path | None = None, **env: str
) -> Iterator[tuple[str, subprocess.Popen]]:
    """Run ``fivetran-events serve`` in its own process group; yield (base URL, process).

    ``config``: a gunicorn configuration file (``serve --config``), e.g. deploy's.
    """
    port = free_port()
    environ = {
        **os.environ,
        "FIVETRAN_EVENTS_REDIS_URL": redis_url,
        "FIVETRAN_EVENTS_WEBHOOK_SECRETS": f"{SECRET},{OTHER_SECRET}",
        "FIVETRAN_EVENTS_API_TOKENS": TOKEN,
        "FIVETRAN_EVENTS_KEY_PREFIX": "test:",
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
            "--workers",
            str(workers),
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
        kill_group(proc, signal.SIGTERM)
        log.close()


def kill_group(proc: subprocess.Popen, sig: int) -> None:
    """Signal the server's process group (it was started in a session of its own)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


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
