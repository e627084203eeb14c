"""A time-scheduled DAG that waits for a connector with ``FivetranDateTimeSensor``.

Each daily run waits until ``demo_connector`` has synced as of the run's
``data_interval_end``, deciding from the history fivetran-events records: a backfill of
past days passes at once, a failed sync fails the run (``propagate_failures_forward``),
and a restarted task waits for the same target. No Fivetran API call is made.
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow.sdk import DAG, task
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_plugin.sensors import FivetranDateTimeSensor

with DAG(
    dag_id="fivetran_sensor_daily",
    # Airflow 3's "@daily" is a CronTriggerTimetable (no interval); this keeps Airflow 2's
    # intervals, so the target is the end of the day being processed.
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=datetime(2026, 11, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["fivetran-events", "example"],
    doc_md=__doc__,
):
    wait = FivetranDateTimeSensor(
        task_id="wait_for_demo_connector",
        connector_id="demo_connector",
        propagate_failures_forward=True,
        deferrable=True,  # waits in the triggerer, woken by the webhook's publish
        timeout=6 * 3600,
    )

    @task
    def transform(synced: dict | None = None) -> None:  # type: ignore[type-arg]
        """Stand-in for the work that needs the day's data."""
        print(f"the connector was synced as of the target by {synced}")

    transform(wait.output)
