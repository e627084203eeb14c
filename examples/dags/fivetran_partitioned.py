"""DAGs that run for a day as soon as Fivetran has synced past it: no sensor, no slot.

With ``FIVETRAN_EVENTS_PARTITION_GRAIN=hour`` fivetran-events' worker posts, for each
successful sync, one partitioned asset event per hour the sync completed (its key is the
hour's start in UTC, ``%Y-%m-%dT%H:%M:%S``). Airflow 3.2+ runs a DAG scheduled with
``PartitionedAssetTimetable`` once per key its partition mapper makes of them:

- ``fivetran_daily_rollup`` rolls the hours of one connector up into days: it runs for
  day D once all 24 hours of D are complete (``RollupMapper`` with ``DayWindow``);
- ``fivetran_two_connectors_same_day`` runs for day D once both connectors completed
  all of D (``a & b``: the same key from both).

A run's ``partition_key`` is the day (``2026-01-14``); the sensor and the operators'
target in such a run is the end of that day (docs/partitions.md).
"""

from __future__ import annotations

import logging

from airflow.sdk import (
    DAG,
    Asset,
    DayWindow,
    PartitionedAssetTimetable,
    RollupMapper,
    StartOfDayMapper,
    task,
)

from fivetran_events.uris import dataset_uri

log = logging.getLogger(__name__)

ORDERS = Asset(dataset_uri("demo_connector"))
PAYMENTS = Asset(dataset_uri("payments_connector"))


def whole_days() -> RollupMapper:
    """An hourly key -> its day, the day run once its 24 hourly keys have all arrived."""
    return RollupMapper(upstream_mapper=StartOfDayMapper(), window=DayWindow())


@task
def build_day(*, dag_run=None) -> str:  # type: ignore[no-untyped-def]
    """Build the day this run is for (a real DAG would run its models for it here)."""
    day = dag_run.partition_key if dag_run is not None else None
    log.info("building %s", day)
    return str(day)


with DAG(
    dag_id="fivetran_daily_rollup",
    schedule=PartitionedAssetTimetable(assets=ORDERS, default_partition_mapper=whole_days()),
    catchup=False,
    tags=["fivetran-events", "example", "partitions"],
    doc_md=__doc__,
):
    build_day()

with DAG(
    dag_id="fivetran_two_connectors_same_day",
    schedule=PartitionedAssetTimetable(
        assets=ORDERS & PAYMENTS, default_partition_mapper=whole_days()
    ),
    catchup=False,
    tags=["fivetran-events", "example", "partitions"],
    doc_md=__doc__,
):
    build_day()
