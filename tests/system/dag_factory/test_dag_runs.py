"""The example SQL folder runs for real: common.sql on SQLite, through dag.test()."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sql" / "sales"


def seed(data: Path) -> None:
    with sqlite3.connect(data / "fivetran_demo.db") as c:
        c.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, day TEXT, amount REAL)")
        c.executemany(
            "INSERT INTO orders VALUES (?, ?, ?)",
            [
                (1, "2026-01-01", 10.0),
                (2, "2026-01-01", 5.5),
                (3, "2026-01-02", 7.0),
                (4, "2026-01-02", None),
            ],
        )


def run_dag(dag: Any) -> Any:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder="/nonexistent", collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    return dag.test()


def test_example_folder_runs_on_sqlite(
    airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every task runs its SQL in order; session_sql attaches the connector's schema."""
    from airflow_plugin.dag_factory import build_dag

    seed(tmp_path)
    monkeypatch.setenv(
        "AIRFLOW_CONN_WAREHOUSE",
        json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "warehouse.db")}),
    )
    folder = tmp_path / "sales"
    shutil.copytree(EXAMPLE, folder)
    run = run_dag(build_dag(folder, dag_id="sales_run_test"))
    assert run.state == "success"
    with sqlite3.connect(tmp_path / "warehouse.db") as c:
        assert c.execute(
            "SELECT day, total, orders FROM daily_revenue ORDER BY day"
        ).fetchall() == [("2026-01-01", 15.5, 2), ("2026-01-02", 7.0, 1)]
        assert c.execute("SELECT days, total, full_refresh FROM revenue_runs").fetchall() == [
            (2, 22.5, 0)
        ]
        assert c.execute("SELECT full_refresh FROM orders_clean_loads").fetchall() == [(0,)]
