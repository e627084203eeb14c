"""Start and stop the benchmark's own redis-server and gunicorn on loopback, by PID."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import redis

from testkit.processes import free_port, poll_until, stop_group

__all__ = ["start_gunicorn", "start_redis", "stop_group"]


def start_redis(workdir: Path, appendonly: bool = True) -> tuple[subprocess.Popen[bytes], str]:
    """Start a redis-server of the benchmark's own on a free loopback port."""
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    # AOF everysec by default, as deploy/ runs it in production; bulk loads may skip it.
    aof = (
        ["--appendonly", "yes", "--appendfsync", "everysec"]
        if appendonly
        else ["--appendonly", "no"]
    )
    proc = subprocess.Popen(
        [
            exe,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(workdir),
            *aof,
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    try:
        poll_until(answers, "redis-server to answer", timeout=5, interval=0.05)
    except TimeoutError:
        stop_group(proc)
        sys.exit("redis-server did not start")
    return proc, url


def start_gunicorn(
    app: str, env: dict[str, str], workers: int
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--log-level",
            "warning",
            app,
        ],
        env={**os.environ, **env},
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    try:
        poll_until(ready, "gunicorn to be ready", timeout=30)
    except TimeoutError:
        stop_group(proc, timeout=15)
        sys.exit("gunicorn did not become ready")
    return proc, base
