"""Logs a machine can read: JSON off a terminal, text on one, ids on each line, no secrets."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryState
from testkit.airflow_harness import AirflowServer
from testkit.forward_support import forwarder
from testkit.processes import poll_until
from testkit.servers import webhook_server
from testkit.support import OTHER_SECRET, SECRET, TOKEN, payload, signed
from testkit.worker_process import WorkerProcess, worker_env
from webhook_app import logs


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Route every logger to a buffer that is not a terminal; restore stderr after."""
    buf = io.StringIO()
    logs.configure(buf)
    yield buf
    logs.configure()


def records(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


class TestFormat:
    def test_json_lines_off_a_terminal(self, captured: io.StringIO) -> None:
        """A stdlib logger's line comes out as one JSON object with level and logger."""
        logging.getLogger("webhook_app.forward").warning("delivery %s: %s", "d1", "retrying")
        (rec,) = records(captured)
        assert rec["event"] == "delivery d1: retrying"
        assert rec["level"] == "warning" and rec["logger"] == "webhook_app.forward"
        assert rec["timestamp"].endswith("Z")

    def test_text_on_a_terminal(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv(logs.FORMAT_ENV, raising=False)
        tty = Terminal()
        logs.configure(tty)
        try:
            logging.getLogger("x").info("hello %s", "people")
        finally:
            logs.configure()
        line = tty.getvalue().strip()
        assert "hello people" in line and not line.startswith("{")

    def test_passwords_in_urls_and_secret_fields_are_redacted(self, captured: io.StringIO) -> None:
        logging.getLogger("x").error(
            "cannot reach redis://:hunter2@10.0.0.1:6379/0", extra={"airflow_password": "pw-42"}
        )
        text = captured.getvalue()
        assert "hunter2" not in text and "pw-42" not in text and "10.0.0.1" in text


@pytest.mark.slow
class TestIds:
    def test_a_delivery_is_one_line_with_its_ids_and_outcome(
        self, redis_url: str, tmp_path: Path
    ) -> None:
        """Under `serve`, a webhook delivery writes one line: gunicorn's access record,
        carrying the request id (the client's, echoed; or a new one), the connector and
        sync ids and the outcome, next to the method, path and status."""
        json_logs = {"FIVETRAN_EVENTS_LOG_FORMAT": "json"}
        with webhook_server(redis_url, tmp_path, workers=1, config=None, **json_logs) as (base, _):
            raw, headers = signed(payload(sync_id="sync-77"))
            given = requests.post(
                f"{base}/webhooks/fivetran",
                data=raw,
                headers={**headers, "X-Request-Id": "req-abc"},
                timeout=10,
            )
            raw, headers = signed(payload(sync_id="sync-78"))
            bad = requests.post(
                f"{base}/webhooks/fivetran",
                data=raw,
                headers={**headers, "X-Request-Id": 'bad id {"x": 1}'},
                timeout=10,
            )
            log_path = next(tmp_path.glob("gunicorn-*.log"))
            poll_until(lambda: "sync-78" in log_path.read_text(), "the access record", 10)
        assert given.status_code == 200 and given.headers["X-Request-Id"] == "req-abc"
        lines = _lines(log_path.read_text())
        (rec,) = [r for r in lines if r.get("sync_id") == "sync-77"]
        assert rec["request_id"] == "req-abc" and rec["connector_id"] == "assimilate_seem"
        assert rec["outcome"] == "recorded" and rec["event"] == "request"
        assert rec["path"] == "/webhooks/fivetran" and rec["status"] == 200
        rid = bad.headers["X-Request-Id"]
        assert len(rid) == 32 and "bad id" not in rid
        (rec,) = [r for r in lines if r.get("sync_id") == "sync-78"]  # not on later lines
        assert rec["request_id"] == rid and rec["outcome"] == "recorded"


# --- the whole path, real processes ---------------------------------------------------------


def _lines(text: str) -> list[dict[str, Any]]:
    """Every non-empty line must be one JSON object (no terminal: JSON by default)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_no_secret_in_the_logs_of_a_delivery_and_a_failed_login(
    settings: Settings, airflow3: AirflowServer, redis_url: str, tmp_path: Path
) -> None:
    """gunicorn, the worker (JWT from Airflow 3) and the CLI log JSON with their ids and
    never the webhook secrets, API token, Airflow passwords or a JWT."""
    af_settings = Settings(
        **{
            **{k: getattr(settings, k) for k in Settings.model_fields},
            "airflow_url": airflow3.url,
            "airflow_username": airflow3.username,
            "airflow_password": airflow3.password,
        }
    )
    wrong_password = "wrong-airflow-password-9f3"
    wrong_token = "not-the-api-token-5e1"
    env = {k: v for k, v in worker_env(af_settings).items() if k.startswith("FIVETRAN_EVENTS_")}
    env.pop(logs.FORMAT_ENV, None)
    config = Path(__file__).parents[3] / "deploy" / "gunicorn.conf.py"
    with webhook_server(redis_url, tmp_path, workers=1, config=config, **env) as (base, _):
        raw, headers = signed(payload(connector_id="logs_conn", sync_id="sync-logs-1"))
        resp = requests.post(
            f"{base}/webhooks/fivetran",
            data=raw,
            headers={**headers, "X-Request-Id": "req-logs-1"},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        assert requests.get(
            f"{base}/api/connectors", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        ).ok
        assert (
            requests.get(
                f"{base}/api/connectors",
                headers={"Authorization": f"Bearer {wrong_token}"},
                timeout=10,
            ).status_code
            == 401
        )
        worker = WorkerProcess(af_settings, tmp_path)
        try:
            store = forwarder(af_settings, airflow3.url, airflow3.username, airflow3.password).store
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                done = [d for d in store.recent(10) if d.fields.get("sync_id") == "sync-logs-1"]
                if done and done[0].state is not DeliveryState.PENDING:
                    break
                time.sleep(0.2)
            assert done and done[0].state is not DeliveryState.PENDING, worker.log()
        finally:
            worker.stop()
    failed_login = subprocess.run(
        [sys.executable, "-m", "webhook_app", "datasets", "check"],
        env={**os.environ, **env, "FIVETRAN_EVENTS_AIRFLOW_PASSWORD": wrong_password},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert failed_login.returncode == 5, failed_login.stderr
    server_log = next(tmp_path.glob("gunicorn-*.log")).read_text()
    worker_log = worker.log_path.read_text()
    server, work = _lines(server_log), _lines(worker_log)
    assert any(
        r.get("request_id") == "req-logs-1"
        and r.get("sync_id") == "sync-logs-1"
        and r.get("connector_id") == "logs_conn"
        for r in server
    ), server_log
    assert any(r.get("path") == "/webhooks/fivetran" and r.get("status") == 200 for r in server)
    assert any(
        r.get("delivery_id", "").startswith("logs_conn:sync-logs-1:")
        and r.get("sync_id") == "sync-logs-1"
        for r in work
    ), worker_log
    everything = server_log + worker_log + failed_login.stdout + failed_login.stderr
    for secret in (SECRET, OTHER_SECRET, TOKEN, wrong_token, airflow3.password, wrong_password):
        assert secret not in everything, secret
    assert "eyJ" not in everything  # every JWT starts with a base64 '{"'
