"""Run the plugin through dag.test() on Airflow 2.11; write what happened as JSON.

Not a test module: tests/system/airflow_plugin/test_airflow2.py runs it with the Airflow 2
venv's Python (testkit/airflow2_harness.py), where ``airflow_plugin`` is the editable
install of this checkout, against a migrated AIRFLOW_HOME and the connection
``fivetran_events_redis`` given in the environment. The history it reads was recorded
by the test through the webhook. Self-contained: the test process's helpers live in an
Airflow 3 venv and are not importable here.

    python airflow2_dagtest.py PART OUT.json [PROGRESS]

PART is ``calendar`` (the seed calendars in poke mode), ``deferrable`` (it appends
``defer <connector>`` to PROGRESS before each run that will defer, so the test can
record the releasing sync) or ``misc`` (short-circuit operator, asset, plugin, macros).
"""

from __future__ import annotations

import json
import sys
import traceback
from datetime import datetime, timezone
from typing import Any

UTC = timezone.utc
#: What on_failure_callback saw, by (dag_id, day): the task's exception as text.
ERRORS: dict[tuple[str, int], str] = {}


def at(day: int, hour: int = 0) -> datetime:
    return datetime(2026, 1, day, hour, tzinfo=UTC)


def remember_failure(context: Any) -> None:
    ERRORS[(context["dag"].dag_id, context["data_interval_end"].day)] = str(
        context.get("exception")
    )


def run(dag: Any, day: int) -> dict[str, Any]:
    """Run one DAG run for Jan ``day``; return each task's state and return value."""
    dr = dag.test(execution_date=at(day))
    out: dict[str, Any] = {
        "dag_run": str(dr.state),
        "data_interval_end": dr.data_interval_end.isoformat(),
        "tasks": {},
    }
    for ti in dr.get_task_instances():
        out["tasks"][ti.task_id] = {
            "state": str(ti.state),
            "value": ti.xcom_pull(task_ids=ti.task_id, key="return_value"),
        }
    error = ERRORS.get((dag.dag_id, day))
    if error is not None:
        out["error"] = error
    return out


def calendar() -> dict[str, Any]:
    """The seed calendars in poke mode, ``schedule="@daily"`` (Airflow 2's data intervals).

    Each (scenario, propagate) variant reads its own connectors ``{variant}_{day}``;
    a WAIT times out after 1 s and soft_fail makes it ``skipped``.
    """
    from airflow import DAG

    from airflow_plugin.sensors import FivetranDateTimeSensor

    results: dict[str, Any] = {}
    for variant, propagate in (
        ("a_prop", True),
        ("a_noprop", False),
        ("b_prop", True),
        ("b_noprop", False),
    ):
        with DAG(
            f"af2_calendar_{variant}", schedule="@daily", start_date=at(1), catchup=False
        ) as dag:
            FivetranDateTimeSensor(
                task_id="wait_for_fivetran",
                connector_id=f"{variant}_{{{{ data_interval_end.day }}}}",
                propagate_failures_forward=propagate,
                mode="poke",
                deferrable=False,
                poke_interval=0.2,
                timeout=1,
                soft_fail=True,
                on_failure_callback=remember_failure,
            )
        results[variant] = {str(day): run(dag, day) for day in range(1, 16)}
    results["timetable"] = type(dag.timetable).__name__
    return results


def deferrable(progress: str) -> dict[str, Any]:
    """Deferred runs released by a sync the test records while the trigger waits."""
    from airflow import DAG

    from airflow_plugin.sensors import FivetranDateTimeSensor

    results: dict[str, Any] = {}
    # (connector, day): d_now is decided before deferring; the others wait (their only
    # success is on Jan 10, the target Jan 12) until the test records a new sync.
    for connector, day, waits in (("d_now", 5, False), ("d_ok", 12, True), ("d_fail", 12, True)):
        with DAG(
            f"af2_deferrable_{connector}", schedule="@daily", start_date=at(1), catchup=False
        ) as dag:
            FivetranDateTimeSensor(
                task_id="wait_for_fivetran",
                connector_id=connector,
                deferrable=True,
                propagate_failures_forward=False,
                recheck_interval=30,
                on_failure_callback=remember_failure,
            )
        if waits:
            with open(progress, "a") as f:
                f.write(f"defer {connector}\n")
        results[connector] = run(dag, day)
    return results


def misc() -> dict[str, Any]:
    """Short-circuit operator, the connector's Dataset, the plugin's entry point and macros."""
    from airflow import DAG, plugins_manager
    from airflow.datasets import Dataset
    from airflow.operators.empty import EmptyOperator
    from airflow.operators.python import PythonOperator
    from airflow.utils.module_loading import import_string

    import airflow_plugin
    from airflow_plugin.compat import AIRFLOW_V_3
    from airflow_plugin.operators.sync import FivetranSyncShortCircuitOperator
    from airflow_plugin.plugin import connector_asset, connector_assets
    from airflow_plugin.triggers.decision import FivetranSyncDecisionTrigger

    out: dict[str, Any] = {"airflow_v_3": AIRFLOW_V_3, "plugin_file": airflow_plugin.__file__}

    with DAG("af2_short_circuit", schedule="@daily", start_date=at(1), catchup=False) as dag:
        FivetranSyncShortCircuitOperator(task_id="needs_sync", connector_id="sc") >> EmptyOperator(
            task_id="fivetran_sync"
        )
    out["short_circuit"] = {str(day): run(dag, day) for day in (5, 7)}

    asset = connector_asset("sc")
    scheduled = DAG("af2_on_asset", schedule=connector_assets("sc", "sc2"), start_date=at(1))
    out["asset"] = {
        "is_dataset": isinstance(asset, Dataset),
        "uri": asset.uri,
        "templated": connector_asset("sc", "fivetran://w/{connector_id}").uri,
        "timetable": type(scheduled.timetable).__name__,
    }

    path, kwargs = FivetranSyncDecisionTrigger("sc", 123, recheck_interval=5).serialize()
    out["trigger_roundtrip"] = import_string(path)(**kwargs).serialize() == (path, kwargs)

    plugins_manager.ensure_plugins_loaded()
    # Airflow 2's plugins_manager (mypy reads Airflow 3's, which moved both).
    plugins = plugins_manager.plugins or []  # type: ignore[attr-defined]
    out["plugins"] = {p.name: type(p).__module__ for p in plugins}
    out["plugin_import_errors"] = dict(plugins_manager.import_errors)  # type: ignore[attr-defined]

    def show(uri: str, last: str) -> dict[str, str]:
        return {"uri": uri, "last": last}

    with DAG("af2_macros", schedule="@daily", start_date=at(1), catchup=False) as dag:
        PythonOperator(
            task_id="render",
            python_callable=show,
            op_kwargs={
                "uri": "{{ macros.fivetran_events.asset_uri('sc') }}",
                "last": "{{ macros.fivetran_events.last_successful_sync('sc', data_interval_end)"
                "['sync_id'] }}",
            },
        )
    out["macros"] = run(dag, 7)
    return out


def main() -> None:
    part, out_path = sys.argv[1], sys.argv[2]
    try:
        if part == "calendar":
            result = calendar()
        elif part == "deferrable":
            result = deferrable(sys.argv[3])
        elif part == "misc":
            result = misc()
        else:
            raise SystemExit(f"unknown part {part!r}")
    except Exception:
        result = {"crash": traceback.format_exc()}
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1, default=str)


if __name__ == "__main__":
    main()
