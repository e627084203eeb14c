"""The provider as the session's real Airflow 3 sees it: CLI, connection UI, extra link."""

from __future__ import annotations

import subprocess
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import redis

from fivetran_events import Settings
from testkit.airflow_harness import AirflowServer, airflow_bin
from testkit.support import SECRET, TOKEN, at, payload
from testkit.support import deliver as post

pytestmark = pytest.mark.slow

DAG_FILE = """
from datetime import datetime, timezone

from airflow.sdk import DAG

from airflow_plugin.sensors import FivetranDateTimeSensor

with DAG("provider_link", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False) as dag:
    FivetranDateTimeSensor(task_id="wait", connector_name="linked orders",
                           criterion="started_after", propagate_failures_forward=False,
                           poke_interval=1, timeout=120)
"""


def test_airflow_providers_list_shows_it(airflow3: AirflowServer) -> None:
    """``airflow providers list`` on the real Airflow names the package and its version."""
    out = subprocess.run(
        [airflow_bin(), "providers", "list", "--output", "plain"],
        env=airflow3.env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    ).stdout
    rows = [line.split() for line in out.splitlines() if line.startswith("fivetran-events ")]
    assert rows, out
    assert rows[0][-1] == "0.1.0"


def test_hook_meta_lists_the_connection_form(airflow3: AirflowServer) -> None:
    """The UI's hook_meta offers type fivetran_events with its fields, login hidden."""
    resp = airflow3.get("/ui/connections/hook_meta")
    assert resp.status_code == 200, resp.text
    (meta,) = [m for m in resp.json() if m["connection_type"] == "fivetran_events"]
    assert meta["hook_class_name"] == "airflow_plugin.hooks.FivetranEventsRedisHook"
    assert meta["hook_name"] == "Fivetran events history (Redis)"
    extra = meta["extra_fields"]
    sentinel = {"sentinels", "sentinel_service", "sentinel_password", "sentinel_ssl"}
    assert set(extra) == {"ssl", "ssl_ca_certs", "key_prefix", "max_sync_duration_hours", *sentinel}
    assert extra["ssl"]["schema"]["type"] == ["boolean", "null"]
    assert extra["ssl_ca_certs"]["schema"]["title"] == "Private CA file"
    assert extra["max_sync_duration_hours"]["schema"]["type"] == ["number", "null"]
    standard = meta["standard_fields"]
    assert standard["login"]["hidden"] is True
    assert standard["url_schema"]["title"] == "Database number"
    assert standard["host"]["hidden"] is False and standard["port"]["placeholder"] == "6379"


def test_hook_meta_offers_the_fivetran_api_form(airflow3: AirflowServer) -> None:
    """Type fivetran: Fivetran's API key and secret and a base URL, schema hidden."""
    resp = airflow3.get("/ui/connections/hook_meta")
    assert resp.status_code == 200, resp.text
    (meta,) = [m for m in resp.json() if m["connection_type"] == "fivetran"]
    assert meta["hook_class_name"] == "airflow_plugin.hooks.FivetranApiHook"
    assert meta["hook_name"] == "Fivetran API (fivetran-events)"
    standard = meta["standard_fields"]
    assert (standard["login"]["title"], standard["password"]["title"]) == ("API key", "API secret")
    assert standard["url_schema"]["hidden"] is True and standard["host"]["hidden"] is False


def test_extra_link_opens_the_connector_at_the_runs_target(
    airflow3: AirflowServer, redis_proc: Any
) -> None:
    """A sensor named by connector_name links to its connector's page at the run's target."""
    from webhook_app import create_app

    url = f"redis://{redis_proc.host}:{redis_proc.port}/0"
    app = create_app(
        Settings(redis_url=url, webhook_secrets=[SECRET], api_tokens=[TOKEN], key_prefix="test:")
    )
    with app.test_client() as http:
        body = payload("sync_end", "linked_pg", at(10, 6), sync_id="linked-ok")
        body["connector_name"] = "linked orders"
        post(http, payload("sync_start", "linked_pg", at(10, 5), sync_id="linked-ok"))
        post(http, body)
    try:
        airflow3.add_dag("provider_link.py", DAG_FILE)
        airflow3.wait_for_parsed("provider_link")
        resp = airflow3.request(
            "POST",
            "/api/v2/dags/provider_link/dagRuns",
            json={"dag_run_id": "linked", "logical_date": "2026-01-10T00:00:00Z"},
        )
        assert resp.status_code == 200, resp.text
        airflow3.wait_for(
            "the sensor to succeed",
            lambda: airflow3.ti_state("provider_link", "linked", "wait") in ("success", "failed"),
            timeout=180,
        )
        assert airflow3.ti_state("provider_link", "linked", "wait") == "success", airflow3.logs()
        links = airflow3.get(
            "/api/v2/dags/provider_link/dagRuns/linked/taskInstances/wait/links"
        ).json()["extra_links"]
        link = urlsplit(links["Fivetran syncs"])
        assert link.path == "/fivetran-events/connectors/linked_pg"
        assert parse_qs(link.query) == {
            "target": ["2026-01-10T00:00:00.000Z"],
            "criterion": ["started_after"],
            "propagate_failures_forward": ["false"],
            "always_wait_when_syncing": ["false"],
            "wait_when_paused": ["false"],
            "wait_when_broken": ["false"],
        }
    finally:
        redis.Redis.from_url(url).flushdb()
