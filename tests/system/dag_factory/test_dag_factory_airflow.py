"""End to end on a real Airflow: a webhook triggers a DAG built from SQL files.

Signed sync_end -> webhook -> worker -> asset event -> the SQL folder's asset-scheduled
DAG runs its SQL on SQLite (through common.sql). Then resync_connector + sync_end: the
run sees full_refresh where reset is allowed and refuses it, visibly, where it is not.
"""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from fivetran_events import Settings
from testkit.airflow_harness import AirflowServer
from testkit.forward_support import forwarder, post_event, run_worker
from webhook_app.forwarding.forwarder import Forwarder

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sql" / "sales"
CONNECTOR = "sql_e2e_conn"
DAG_ID = "sales_e2e"


@pytest.fixture
def fw(settings: Settings, airflow3: AirflowServer) -> Forwarder:
    return forwarder(settings, airflow3.url, airflow3.username, airflow3.password)


@pytest.fixture
def sales_dag(airflow3: AirflowServer) -> Path:
    """The example folder, pointed at this test's connector, as a two-line DAG file."""
    folder = airflow3.home / "sql" / DAG_ID
    if not folder.exists():
        shutil.copytree(EXAMPLE, folder)
        toml = folder / "dag.toml"
        toml.write_text(toml.read_text().replace('"demo_connector"', f'"{CONNECTOR}"'))
        with sqlite3.connect(airflow3.warehouse_dir / "fivetran_demo.db") as c:
            c.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, day TEXT, amount REAL)")
            c.executemany(
                "INSERT INTO orders VALUES (?, ?, ?)",
                [(1, "2026-01-01", 10.0), (2, "2026-01-01", 5.5), (3, "2026-01-02", 7.0)],
            )
        airflow3.add_dag(
            f"{DAG_ID}.py",
            "from airflow_plugin.dag_factory import dags_from_folder"
            f"\n\ndags_from_folder({str(folder)!r}, dag_id={DAG_ID!r})\n",
        )
    airflow3.wait_for_dag(DAG_ID)
    airflow3.wait_for_asset(f"fivetran://connector/{CONNECTOR}")
    return folder


def successful_runs(airflow3: AirflowServer, n: int) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        runs = [r for r in airflow3.dag_runs(DAG_ID) if r["state"] == "success"]
        failed = [r for r in airflow3.dag_runs(DAG_ID) if r["state"] == "failed"]
        assert not failed, f"a run of {DAG_ID} failed: {failed}\n{airflow3.logs(tail=30)}"
        return runs if len(runs) >= n else None

    return airflow3.wait_for(f"{n} successful run(s) of {DAG_ID}", done, timeout=240)


def sync(http: Any, fw: Forwarder, resync: bool = False) -> str:
    sid = f"sql-{uuid.uuid4()}"
    if resync:
        post_event(http, event="resync_connector", connector_id=CONNECTOR)
    post_event(http, event="sync_start", connector_id=CONNECTOR, sync_id=sid)
    post_event(http, connector_id=CONNECTOR, sync_id=sid)
    run_worker(fw)
    return sid


def task_log(airflow3: AirflowServer, run_id: str, task_id: str) -> str:
    resp = airflow3.get(
        f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1",
        params={"full_content": "true"},
    )
    assert resp.status_code == 200, resp.text
    return resp.text  # JSON of the log lines; the words are in it


def test_webhook_runs_the_sql_and_full_refresh_is_seen_or_refused(
    http: Any, airflow3: AirflowServer, fw: Forwarder, sales_dag: Path
) -> None:
    db = airflow3.warehouse_dir / "warehouse.db"
    sync(http, fw)
    successful_runs(airflow3, 1)
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT day, total FROM daily_revenue ORDER BY day").fetchall() == [
            ("2026-01-01", 15.5),
            ("2026-01-02", 7.0),
        ]
        assert c.execute("SELECT full_refresh FROM orders_clean_loads").fetchall() == [(0,)]

    sync(http, fw, resync=True)
    runs = successful_runs(airflow3, 2)
    with sqlite3.connect(db) as c:
        loads = c.execute("SELECT full_refresh FROM orders_clean_loads").fetchall()
        summary = c.execute("SELECT full_refresh FROM revenue_runs").fetchall()
    assert loads == [(0,), (1,)]  # orders_clean may reset: it saw full_refresh
    assert summary == [(0,), (0,)]  # daily_revenue has reset_allowed = false: refused
    latest = max(runs, key=lambda r: r["run_after"])["dag_run_id"]
    assert "REFUSED" in task_log(airflow3, latest, "revenue.02_summary")
