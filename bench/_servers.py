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


#: The production gunicorn configuration: the benchmark serves the app as deploy/ does.
GUNICORN_CONF = Path(__file__).resolve().parents[1] / "deploy" / "gunicorn.conf.py"


def start_gunicorn(
    app: str, env: dict[str, str], workers: int, log: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """Serve ``app`` with deploy/gunicorn.conf.py on a free loopback port; logs go to ``log``.

    The production file, so the benchmark pays what production pays per request (its
    access record, multiprocess metrics); only the bind address and the worker count are
    the benchmark's. The logs go to a file: one line per request would bury the results.
    """
    port = free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--config", str(GUNICORN_CONF), app],
            env={
                **os.environ,
                "GUNICORN_BIND": f"127.0.0.1:{port}",
                "GUNICORN_WORKERS": str(workers),
                "FIVETRAN_EVENTS_LOG_FORMAT": "json",
                **env,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
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
