"""DAG integrity: every example DAG imports cleanly in Airflow, with the expected shape."""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "dags"


def test_every_example_dag_imports(airflow_db: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES))  # LOAD_EXAMPLES is off (testkit/airflow_env.py)
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {
        "sales",
        "fivetran_asset_consumer",
        "fivetran_sensor_daily",
        "fivetran_sync_then_models",
        "fivetran_table_consumer",
        "fivetran_daily_rollup",
        "fivetran_two_connectors_same_day",
    }
    table = bag.get_dag("fivetran_table_consumer")
    assert {a.uri for a in table.timetable.asset_condition.objects} == {
        "postgres://warehouse.example.com:5432/analytics/demo/orders"
    }
    sensor = bag.get_dag("fivetran_sensor_daily").get_task("wait_for_demo_connector")
    assert type(sensor).__name__ == "FivetranDateTimeSensor"
    sync = bag.get_dag("fivetran_sync_then_models").get_task("sync_demo_connector")
    assert type(sync).__name__ == "FivetranSyncOperator"
    rollup = bag.get_dag("fivetran_daily_rollup").timetable
    assert type(rollup).__name__ == "PartitionedAssetTimetable"
    assert type(rollup.default_partition_mapper).__name__ == "RollupMapper"
    both = bag.get_dag("fivetran_two_connectors_same_day").timetable
    assert {a.uri for a in both.asset_condition.objects} == {
        "fivetran://connector/demo_connector",
        "fivetran://connector/payments_connector",
    }
    sales = bag.get_dag("sales")
    assert sorted(sales.task_dict) == ["orders_clean", "revenue.01_daily", "revenue.02_summary"]
