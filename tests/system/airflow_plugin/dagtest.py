"""Run DAGs defined in a test through dag.test() and read back what each task did."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from testkit.support import at, deliver, payload


def serialize(dag: Any) -> None:
    """Write a DAG defined in a test to the DB (Airflow needs it before dag.test())."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder="/nonexistent", collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)


def run(dag: Any, logical_date: datetime | None, **kwargs: Any) -> dict[str, Any]:
    """Run one DAG run with dag.test(); return {task_id: (state, return value)} and the run."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    serialize(dag)
    dr = dag.test(logical_date=logical_date, **kwargs)
    out: dict[str, Any] = {"_run": dr}
    with create_session() as session:
        for ti in dr.get_task_instances(session=session):
            value = session.scalars(
                XComModel.get_many(
                    run_id=dr.run_id, key="return_value", dag_ids=dag.dag_id, task_ids=ti.task_id
                )
            ).first()
            out[ti.task_id] = (
                str(ti.state),
                XComModel.deserialize_value(value) if value is not None else None,
            )
    return out


def sync(
    http: Any,
    connector_id: str,
    ended: datetime,
    status: str = "SUCCESSFUL",
    sync_id: str | None = None,
    started: datetime | None = None,
    **data: Any,
) -> None:
    """Record one sync (its start when given, then its end) through the webhook."""
    if started is not None:
        deliver(http, payload("sync_start", connector_id, started, sync_id=sync_id))
    deliver(http, payload("sync_end", connector_id, ended, sync_id=sync_id, status=status, **data))


# --- shared by the sensor-behaviour and frozen-clock tests ---------------------------

#: A sensor that gives up within a second (soft_fail: skipped, not failed).
FAST = {"poke_interval": 0.2, "timeout": 1, "soft_fail": True}


def one_sensor_dag(dag_id: str, schedule: Any, **sensor: Any) -> Any:
    from airflow.sdk import DAG

    from airflow_plugin.sensors import FivetranDateTimeSensor

    with DAG(dag_id, schedule=schedule, start_date=at(1), catchup=False) as dag:
        FivetranDateTimeSensor(task_id="s", **{"connector_id": "c1", **FAST, **sensor})
    return dag


def daily_syncs(http: Any, days: range = range(1, 16)) -> None:
    for day in days:
        sync(http, "c1", at(day, 6), sync_id=f"ok-{day}")


def result(out: dict[str, Any]) -> tuple[str, str | None, str | None]:
    state, value = out["s"]
    return state, (value or {}).get("target"), (value or {}).get("sync_id")


def z(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: The view of one connector over the seed's first half of January (the UI tests).
PAGE = "/fivetran-events/connectors/{}?start=2026-01-01&end=2026-01-15"


def seed(http: Any, connector_id: str, scenario: list[tuple[str, Any, str]]) -> None:
    """Record a scenario through the webhook, each sync 20 minutes long."""
    for sid, ended, status in scenario:
        sync(http, connector_id, ended, status, sync_id=sid, started=ended.replace(minute=0))
