"""Many deferred sensors on the real triggerer: one subscription, each woken by its own sync.

The in-process scale tests (test_trigger.py, test_trigger_scale.py) run triggers on a
loop of their own; this one lets Airflow's scheduler defer a mapped sensor of 40 tasks
and its triggerer hold them, so the sharing is shown where it matters. (Forty, not more:
each task starts and resumes as a process of its own at the suite's parallelism of 2,
which is most of this test's time; `python -m bench.sensor scale` holds 1,000.)
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
import requests

from fivetran_events.timeutil import iso
from testkit.airflow_harness import AirflowServer
from testkit.servers import webhook_server
from testkit.support import WEBHOOK_PATH, at, pattern_listeners, payload, signed

N = 40
DAG_ID = "many_deferred"
#: Before every sync the test sends, after none it does not: each sensor waits until its
#: connector's sync_end arrives.
TARGET = at(1, month=6)

DAG_FILE = f"""
from airflow.sdk import DAG
from airflow_plugin.sensors import FivetranDateTimeSensor

with DAG("{DAG_ID}", schedule=None, catchup=False, max_active_tasks={N}) as dag:
    FivetranDateTimeSensor.partial(
        task_id="wait", deferrable=True, target_time="{iso(TARGET)}", recheck_interval=600,
        timeout=1800,
    ).expand(connector_id=[f"many_{{i}}" for i in range({N})])
"""


def states(airflow: AirflowServer) -> dict[int, str]:
    return {
        int(i): str(s)
        for i, s in airflow.query(
            "select map_index, state from task_instance where dag_id=%s and task_id='wait'", DAG_ID
        )
    }


def held_by_triggerer(airflow: AirflowServer) -> int:
    ((count,),) = airflow.query(
        'select count(*) from task_instance ti join "trigger" t on t.id = ti.trigger_id '
        "where ti.dag_id=%s and ti.state='deferred' and t.triggerer_id is not null",
        DAG_ID,
    )
    return int(count)


def deciding_syncs(airflow: AirflowServer) -> dict[int, str]:
    """Each finished sensor's return value (the deciding sync), by map index."""
    found = {}
    for i, raw in airflow.query(
        "select map_index, value from xcom where dag_id=%s and task_id='wait' and "
        "key='return_value'",
        DAG_ID,
    ):
        value = json.loads(raw) if isinstance(raw, str) else raw
        found[int(i)] = str(value["sync_id"])
    return found


def send(base: str, indexes: list[int]) -> None:
    """A signed sync_end for each connector, through the real webhook server."""
    with requests.Session() as http:
        for i in indexes:
            raw, headers = signed(payload("sync_end", f"many_{i}", sync_id=f"many-sync-{i}"))
            resp = http.post(base + WEBHOOK_PATH, data=raw, headers=headers, timeout=10)
            assert resp.status_code == 200, resp.text


@pytest.mark.slow
class TestOnTheRealTriggerer:
    def test_many_sensors_share_one_subscription_and_wake_alone(
        self, airflow3: AirflowServer, redis_url: str, client: redis.Redis, tmp_path: Path
    ) -> None:
        """N deferred sensors hold ONE pattern subscription; a sync wakes only its own.

        Half the connectors get a sync_end: exactly those sensors succeed, each with its
        own connector's sync, while the other half stay deferred; then the rest follow.
        """
        from airflow_plugin.triggers._wakeups import POOL_SIZE

        airflow3.add_dag("many_deferred.py", DAG_FILE)
        airflow3.wait_for_parsed(DAG_ID)
        airflow3.trigger(DAG_ID, "many")
        airflow3.wait_for(
            f"{N} sensors held by the triggerer",
            lambda: held_by_triggerer(airflow3) == N,
            timeout=900,
            interval=2.0,
        )
        airflow3.wait_for(
            "the triggerer to subscribe", lambda: pattern_listeners(client) >= 1, timeout=60
        )
        time.sleep(3.0)  # the runner starts new triggers within its 1 s loop
        assert pattern_listeners(client) == 1
        assert client.execute_command("PUBSUB", "NUMPAT") == 1
        # the triggerer's pool and listener, this test's client, and little else
        assert len(client.client_list()) <= POOL_SIZE + 3, client.client_list()

        first = list(range(0, N, 2))
        rest = [i for i in range(N) if i not in first]
        with webhook_server(redis_url, tmp_path) as (base, _proc):
            send(base, first)
            airflow3.wait_for(
                "the first half to succeed",
                lambda: all(states(airflow3).get(i) == "success" for i in first),
                timeout=300,
            )
            time.sleep(2.0)  # a wrong wake-up would have fired by now too
            assert {i for i, s in states(airflow3).items() if s == "deferred"} == set(rest)
            assert deciding_syncs(airflow3) == {i: f"many-sync-{i}" for i in first}

            send(base, rest)
            airflow3.wait_for(
                "every sensor to succeed",
                lambda: set(states(airflow3).values()) == {"success"},
                timeout=300,
            )
        assert deciding_syncs(airflow3) == {i: f"many-sync-{i}" for i in range(N)}
        airflow3.wait_for(
            "the triggerer to stop listening", lambda: pattern_listeners(client) == 0, timeout=60
        )
