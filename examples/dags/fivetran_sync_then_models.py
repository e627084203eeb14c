"""Start demo_connector's sync every morning, wait for it by push, then run the models.

``FivetranSyncOperator`` asks Fivetran for a sync and waits, deferred, until the sync
that started after it asked has ended: the webhook's ``sync_end``, recorded by
fivetran-events, wakes it (no polling of Fivetran's API; after ``fallback_after``
without any webhook it falls back to reading the connection). A run whose day is
already synced triggers nothing (``skip_if_synced_after_data_interval_end``).

The models are the SQL folder's DAG (``sales_sql.py``, ``examples/sql/sales``): it is
scheduled on the connector's asset, which the same ``sync_end`` updates through
fivetran-events' forwarding, so it starts as this task succeeds.
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow.sdk import DAG, task
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_plugin.operators.sync import FivetranSyncOperator

with DAG(
    dag_id="fivetran_sync_then_models",
    schedule=CronDataIntervalTimetable("0 6 * * *", timezone="UTC"),
    start_date=datetime(2026, 11, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["fivetran-events", "example"],
    doc_md=__doc__,
    # Paused until you unpause it: it calls Fivetran's API, which needs the
    # fivetran_default connection (the local stack has no Fivetran account).
    is_paused_upon_creation=True,
):
    sync = FivetranSyncOperator(
        task_id="sync_demo_connector",
        connector_id="demo_connector",
        # fivetran_conn_id="fivetran_default",  login = API key, password = secret
        skip_if_synced_after_data_interval_end=True,
        fallback_after=600,  # no webhook for 10 minutes: poll Fivetran instead
    )

    @task
    def report(synced: dict | None = None) -> None:  # type: ignore[type-arg]
        """Say which sync the models will read (sync id, start, end)."""
        print(f"demo_connector synced: {synced}; the sales models run on its asset next")

    report(sync.output)
