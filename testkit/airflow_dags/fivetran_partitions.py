"""Test DAGs on two connectors' partitioned assets (copied into the test Airflow).

``daily_part_a`` runs once per day key connector ``part_a`` completed, ``daily_both``
once per day both ``part_a`` and ``part_b`` completed, ``plain_part_a`` once per plain
event of ``part_a``, as any asset-scheduled DAG: both kinds of consumer on one asset.
``daily_cd`` runs once per day both ``part_c`` and ``part_d`` completed.
The tests read the runs' partition keys from Airflow's database; the tasks do nothing.
"""

from __future__ import annotations

from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, StartOfDayMapper, task

PART_A = Asset("fivetran://connector/part_a")
PART_B = Asset("fivetran://connector/part_b")
#: Only the test of keyed events posted at the same instant sends to these two.
PART_C = Asset("fivetran://connector/part_c")
PART_D = Asset("fivetran://connector/part_d")


def _dag(dag_id: str, schedule: object) -> DAG:
    with DAG(
        dag_id=dag_id,
        schedule=schedule,
        catchup=False,
        max_active_runs=10_000,  # no run waits queued (fivetran_consumer.py says why)
        tags=["fivetran-events-tests"],
    ) as dag:

        @task
        def noop() -> None:
            pass

        noop()
    return dag


daily_part_a = _dag(
    "daily_part_a",
    PartitionedAssetTimetable(assets=PART_A, default_partition_mapper=StartOfDayMapper()),
)
daily_both = _dag(
    "daily_both",
    PartitionedAssetTimetable(assets=PART_A & PART_B, default_partition_mapper=StartOfDayMapper()),
)
plain_part_a = _dag("plain_part_a", [PART_A])
daily_cd = _dag(
    "daily_cd",
    PartitionedAssetTimetable(assets=PART_C & PART_D, default_partition_mapper=StartOfDayMapper()),
)
