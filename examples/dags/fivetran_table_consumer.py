"""A DAG that runs when one destination table lands, not when any table of its connector does.

With ``FIVETRAN_EVENTS_ASSET_GRANULARITY=table`` (or ``both``) the worker posts one asset
event per table a DAG reads, named as Airflow's SQL lineage and OpenLineage name the
table (docs/tables.md). ``name_table`` gives the same URI from the destination's kind
and address, so this DAG and a SQL task reading ``demo.orders`` meet on one asset.
"""

from __future__ import annotations

import logging

from airflow.sdk import DAG, Asset, task

from fivetran_events.destinations import name_table

#: The demo destination: Fivetran's ``GET /v1/destinations/{group}`` says this.
WAREHOUSE = {"host": "warehouse.example.com", "port": 5432, "database": "analytics"}
ORDERS = name_table("postgres_warehouse", WAREHOUSE, "demo", "orders")
log = logging.getLogger(__name__)

with DAG(
    dag_id="fivetran_table_consumer",
    schedule=[Asset(ORDERS.uri)],  # postgres://warehouse.example.com:5432/analytics/demo/orders
    catchup=False,
    tags=["fivetran-events", "example"],
    doc_md=__doc__,
):

    @task
    def report(*, triggering_asset_events=None) -> list[dict]:  # type: ignore[no-untyped-def]
        """Log the table's sync (``full_refresh`` after a resync of this table only)."""
        seen = []
        for events in (triggering_asset_events or {}).values():
            for event in events:
                extra = dict(event.extra or {})
                log.info(
                    "%s.%s synced by %s (full refresh: %s)",
                    extra.get("schema"),
                    extra.get("table"),
                    extra.get("sync_id"),
                    extra.get("full_refresh"),
                )
                seen.append(extra)
        return seen

    report()
