"""A deferred sensor on the real triggerer whose connector turns broken ends FAIL at its
next look, not at its timeout (30 minutes here).

Broken by reconcile reading ``setup_state: broken`` from Fivetran's list (the stand-in),
which publishes nothing: the trigger's periodic re-check finds it. Broken by a
``connection_failure`` webhook, whose write publishes: the trigger decides at once.
"""

from __future__ import annotations

import time

import pytest
import redis

from fivetran_events import HistoryWriter, Settings, parse_event
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.reconcile import reconcile
from fivetran_events.timeutil import iso
from testkit.airflow_harness import AirflowServer
from testkit.fivetran_api import FivetranStandIn, serving
from testkit.support import at, encode, pattern_listeners, payload

RECHECK = 4
#: The triggerer supervisor's loop (<= 1 s) and slack for 2 shared cores.
MARGIN = 1.0 + 3.0
LAST_SUCCESS = at(1, month=5)
TARGET = at(1, month=6)

DAG_FILE = f"""
from airflow.sdk import DAG
from airflow_plugin.sensors import FivetranDateTimeSensor

for name in ("broken_by_list", "broken_by_event"):
    with DAG(name, schedule=None, catchup=False) as dag:
        FivetranDateTimeSensor(task_id="wait", connector_id=name, deferrable=True,
                               target_time="{iso(TARGET)}", recheck_interval={RECHECK},
                               timeout=1800)
    globals()[name] = dag
"""


def held(airflow: AirflowServer, dag_id: str) -> bool:
    return bool(
        airflow.query(
            'select 1 from task_instance ti join "trigger" t on t.id = ti.trigger_id where '
            "ti.dag_id=%s and ti.state='deferred' and t.triggerer_id is not null",
            dag_id,
        )
    )


def released_after(airflow: AirflowServer, dag_id: str, since: float) -> float:
    """Seconds from ``since`` until the task left DEFERRED; it must then fail."""
    airflow.wait_for(
        "the trigger to fire",
        lambda: airflow.ti_state(dag_id, "b1", "wait") != "deferred",
        timeout=120,
        interval=0.05,
    )
    took = time.time() - since
    airflow.wait_for(
        "the sensor to finish",
        lambda: airflow.ti_state(dag_id, "b1", "wait") in ("success", "failed"),
        timeout=120,
    )
    assert airflow.ti_state(dag_id, "b1", "wait") == "failed", airflow.logs("triggerer")
    return took


def trigger_message(airflow: AirflowServer, dag_id: str) -> str:
    folder = airflow.home / "logs" / f"dag_id={dag_id}" / "run_id=b1" / "task_id=wait"
    return "\n".join(p.read_text() for p in sorted(folder.glob("*trigger*")))


@pytest.mark.slow
def test_a_deferred_sensor_on_a_connector_that_turns_broken_fails_at_its_next_look(
    airflow3: AirflowServer, client: redis.Redis, settings: Settings, writer: HistoryWriter
) -> None:
    for cid in ("broken_by_list", "broken_by_event"):
        writer.record(parse_event(encode(payload("sync_end", cid, LAST_SUCCESS, sync_id="ok"))))
    airflow3.add_dag("broken_live.py", DAG_FILE)
    airflow3.wait_for_parsed("broken_by_list", "broken_by_event")
    for dag_id in ("broken_by_list", "broken_by_event"):
        airflow3.trigger(dag_id, "b1")
    airflow3.wait_for(
        "both sensors held by the triggerer",
        lambda: held(airflow3, "broken_by_list") and held(airflow3, "broken_by_event"),
        timeout=180,
    )
    airflow3.wait_for(
        "the triggerer to subscribe", lambda: pattern_listeners(client) >= 1, timeout=60
    )
    time.sleep(
        2.0
    )  # the runner starts a trigger within its loop (<= 1 s); it reads once, then waits

    with serving(FivetranStandIn()) as fivetran:
        fivetran.connector("broken_by_list", succeeded_at=LAST_SUCCESS, setup_state="broken")
        with FivetranClient("key", "secret", fivetran.url, backoff=0.01) as api:
            reconcile(client, api, "test:", settings.retention_ms, settings.max_clock_skew_ms)
    by_list = released_after(airflow3, "broken_by_list", time.time())
    assert by_list < RECHECK + MARGIN, by_list
    message = trigger_message(airflow3, "broken_by_list")
    assert "on the periodic re-check" in message  # reconcile publishes nothing
    assert "setup_state broken in Fivetran's connection list" in message

    posted = time.time()
    writer.record(
        parse_event(encode(payload("connection_failure", "broken_by_event", reason="bad password")))
    )
    by_event = released_after(airflow3, "broken_by_event", posted)
    assert by_event < 1.0 + MARGIN, by_event
    message = trigger_message(airflow3, "broken_by_event")
    assert "on a change message" in message and "connection_failure (bad password)" in message
    print(f"released {by_list:.2f} s after reconcile, {by_event:.2f} s after the webhook event")
