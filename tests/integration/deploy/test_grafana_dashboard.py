"""Every metric deploy/grafana/fivetran-events.json and deploy/prometheus/alerts.yml
query is exported by a running app (real gunicorn) or worker (``fivetran-events worker
--metrics-port``); the dashboard's shape: tests/unit/deploy/test_grafana_shape.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from fivetran_events import Settings
from testkit.deploy_files import alert_exprs, dashboard_exprs
from testkit.fivetran_api import FivetranStandIn, serving
from testkit.processes import poll_until
from testkit.promql import metric_names
from testkit.servers import free_port, webhook_server
from testkit.support import TOKEN, payload, signed
from testkit.worker_process import WorkerProcess


def exported(text: str) -> set[str]:
    """Sample names in an exposition, as PromQL selects them (``_total``, ``_bucket``...)."""
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_queried_metric_is_exported(
    redis_url: str, settings: Settings, tmp_path: Path
) -> None:
    """Post a sync to real gunicorn; a real worker tries Airflow (down) and reconciles
    against Fivetran's stand-in (a success never delivered, an inactive webhook): scrape
    both."""
    names = set().union(*map(metric_names, dashboard_exprs() + alert_exprs()))
    assert len(names) >= 10
    port = free_port()
    # Airflow is a closed loopback port: every attempt is a retry, which is all we need.
    airflow_url = f"http://127.0.0.1:{free_port()}"
    fivetran = FivetranStandIn()
    fivetran.connector(
        "missed",
        succeeded_at=datetime.now(timezone.utc) - timedelta(minutes=1),
        schedule_type="auto",  # a schedule: the overdue gauge has a series
        sync_frequency=60,
    )
    fivetran.webhooks["w1"] = {"id": "w1", "type": "account", "url": "https://x", "active": False}
    stack = serving(fivetran)
    stack.__enter__()
    worker = WorkerProcess(
        settings,
        tmp_path,
        args=("--metrics-port", str(port)),
        airflow_url=airflow_url,
        airflow_username="u",
        airflow_password="p",
        airflow_api_version="2",
        airflow_timeout_seconds=1,
        forward_backoff_max_seconds=1,
        fivetran_api_url=fivetran.url,
        fivetran_api_key=fivetran.api_key,
        fivetran_api_secret=fivetran.api_secret,
        reconcile_minutes=0.05,
    )
    try:
        (tmp_path / "metrics").mkdir()
        # With an Airflow URL the webhook creates deliveries for the worker.
        with webhook_server(
            redis_url, tmp_path / "metrics", FIVETRAN_EVENTS_AIRFLOW_URL=airflow_url
        ) as (base, _proc):
            raw, headers = signed(payload(connector_id="dashboard"))
            assert (
                requests.post(
                    base + "/webhooks/fivetran", data=raw, headers=headers, timeout=10
                ).json()["status"]
                == "recorded"
            )

            def attempted() -> str:
                assert worker.proc.poll() is None, "the worker exited:\n" + worker.log()
                try:
                    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
                except requests.ConnectionError:
                    return ""
                # Retries of the delivered sync and of the reconciled one: at least one.
                retrying = 'fivetran_events_forward_attempts_total{outcome="retrying"}'
                tried = retrying in text and f"{retrying} 0.0" not in text
                reconciled = 'fivetran_events_reconciled_total{connector="missed"} 1.0'
                return text if tried and reconciled in text else ""

            worker_text = poll_until(
                attempted, "the worker's first attempt and reconcile", 60, 0.2, details=worker.log
            )
            app_text = requests.get(
                base + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
            ).text
    finally:
        worker.stop()
        stack.__exit__(None, None, None)
    missing = names - exported(app_text) - exported(worker_text)
    assert not missing, f"queried but not exported: {sorted(missing)}"
