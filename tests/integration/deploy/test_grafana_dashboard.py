"""deploy/grafana/fivetran-events.json is a Grafana dashboard, and every metric it and
deploy/prometheus/alerts.yml query is exported by a running app (real gunicorn) or
worker (``fivetran-events worker --metrics-port``)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fivetran_events import Settings
from testkit.fivetran_api import FivetranStandIn, serving
from testkit.processes import poll_until
from testkit.servers import free_port, webhook_server
from testkit.support import TOKEN, payload, signed
from testkit.worker_process import WorkerProcess

from .promql import metric_names

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "fivetran-events.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def alert_exprs() -> list[str]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def exported(text: str) -> set[str]:
    """Sample names in an exposition, as PromQL selects them (``_total``, ``_bucket``...)."""
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


class TestShape:
    def test_dashboard_shape(self) -> None:
        d = dashboard()
        assert d["uid"] == "fivetran-events" and d["title"]
        assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36
        variables = {v["name"] for v in d["templating"]["list"]}
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids))
        graphs = [p for p in d["panels"] if p["type"] != "row"]
        assert len(graphs) >= 8
        for p in d["panels"]:
            g = p["gridPos"]
            assert p["title"] and g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24
        for p in graphs:
            assert p["type"] in {"timeseries", "stat", "table", "gauge", "bargauge"}
            assert p["targets"], p["title"]
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), p["title"]
            assert all(t["expr"].strip() for t in p["targets"])
            assert p["datasource"]["uid"].strip("${}") in variables

    def test_promql_names_are_read_out(self) -> None:
        """The extractor drops functions, labels, ranges and grouping, and keeps metrics."""
        assert metric_names(
            'histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y"}'
            "[5m]))) / max without (instance) (b) > 26 * 3600"
        ) == {"a_bucket", "b"}
        names = set().union(*map(metric_names, dashboard_exprs()))
        assert "fivetran_events_forward_deliveries" in names and "le" not in names


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
