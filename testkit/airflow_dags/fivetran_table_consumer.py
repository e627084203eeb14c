"""A test DAG scheduled on one destination table's asset (copied into the test Airflow).

The table is ``shop.orders`` of a Postgres destination, named as
``fivetran_events.destinations.name_table`` names it; ``shop.items`` of the same
destination has no DAG, so Airflow has no asset of it. Each run writes what it saw to
``$FTE_TEST_OUTPUT/table_orders``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from airflow.sdk import DAG, Asset, task

#: What the tests' Fivetran stand-in says of the destination (``GET /v1/destinations``).
WAREHOUSE = {"host": "wh.test", "port": 5432, "database": "analytics"}
ORDERS_URI = "postgres://wh.test:5432/analytics/shop/orders"

with DAG(
    dag_id="consume_table_orders",
    schedule=[Asset(ORDERS_URI)],
    catchup=False,
    max_active_runs=10_000,  # as fivetran_consumer.py: no run waits queued
    tags=["fivetran-events-tests"],
):

    @task
    def record(triggering_asset_events=None, run_id=None) -> None:  # type: ignore[no-untyped-def]
        seen = [
            {"uri": str(asset), "extra": dict(ev.extra or {})}
            for asset, events in (triggering_asset_events or {}).items()
            for ev in events
        ]
        out = Path(os.environ.get("FTE_TEST_OUTPUT", "/tmp")) / "table_orders"
        out.mkdir(parents=True, exist_ok=True)
        name = f"{run_id}.json".replace(":", "_").replace("+", "_")
        (out / name).write_text(json.dumps({"run_id": run_id, "events": seen}))

    record()
