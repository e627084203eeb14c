"""deploy/gunicorn.conf.py loads, binds loopback by default and logs JSON per request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from testkit.processes import free_port, stop_group
from testkit.servers import wait_ready
from testkit.support import SECRET

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "deploy" / "gunicorn.conf.py"


def test_check_config_defaults() -> None:
    """gunicorn accepts the file; bind defaults to loopback."""
    env = {**os.environ, "FIVETRAN_EVENTS_WEBHOOK_SECRETS": SECRET}
    env.pop("GUNICORN_BIND", None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--print-config",
            "-c",
            str(CONFIG),
            "webhook_app:create_app()",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    settings = {
        k.strip(): v.strip() for k, _, v in (line.partition("=") for line in out.splitlines())
    }
    assert settings["bind"] == "['127.0.0.1:8000']"
    assert settings["graceful_timeout"] == "20"
    # threads: slow clients hold a thread, not a worker (test_slow_clients.py)
    assert (settings["worker_class"], settings["threads"]) == ("gthread", "32")
    assert settings["control_socket_disable"] == "True"


@pytest.mark.slow
def test_json_access_log(redis_url: str, tmp_path: Path) -> None:
    """Each request is one JSON access-log line with method, path and status."""
    port = free_port()
    env = {
        **os.environ,
        "FIVETRAN_EVENTS_WEBHOOK_SECRETS": SECRET,
        "FIVETRAN_EVENTS_REDIS_URL": redis_url,
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "GUNICORN_WORKERS": "1",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "m"),
    }
    log = tmp_path / "out.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "webhook_app", "serve", "--config", str(CONFIG)],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_ready(f"http://127.0.0.1:{port}/healthz", proc=proc)
            assert requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5).ok
        finally:
            stop_group(proc, timeout=15)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    ready = [entry for entry in lines if entry.get("path") == "/readyz"]
    assert ready and ready[-1]["status"] == 200 and ready[-1]["method"] == "GET"
    assert ready[-1]["request_id"]  # the app's id for the request, on its access record
