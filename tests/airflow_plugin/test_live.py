"""Deferred waits on a real scheduler and triggerer (dag.test() cannot show these).

A sync recorded through the webhook while the sensor is deferred releases it within a
second; with the publish lost, within one re-check interval.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fivetran_events import HistoryWriter, parse_event
from tests.fivetran_events.test_decision import CALENDARS, SCENARIO_A, SCENARIO_B
from tests.support import encode, payload

from .conftest import AIRFLOW_ENV, conn_uri
from .dagtest import post
from .live import LiveAirflow, live_airflow

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

DAG_FILE = '''
from datetime import datetime, timezone

from airflow.sdk import DAG, CronDataIntervalTimetable

from airflow_plugin.assets import connector_asset
from airflow_plugin.sensors import FivetranDateTimeSensor

for name, recheck in (("live_wake", 300), ("live_lost", 4)):
    with DAG(name, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
             catchup=False) as dag:
        FivetranDateTimeSensor(task_id="wait", connector_id=name, deferrable=True,
                               recheck_interval=recheck, timeout=600)
    globals()[name] = dag

with DAG("live_timeout", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False) as timeout_dag:
    FivetranDateTimeSensor(task_id="wait", connector_id="live_timeout", deferrable=True,
                           recheck_interval=300, timeout=3)

# An asset-triggered run (no data interval): the target falls back to the event's ended_at.
with DAG("live_on_asset", schedule=[connector_asset("live_asset")],
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False) as on_asset:
    FivetranDateTimeSensor(task_id="wait", connector_id="live_asset", deferrable=True,
                           recheck_interval=300, timeout=600)

# The seed's January backfill, run by the scheduler: 15 @daily runs (targets Jan 1..15),
# each with the four scenario/flag sensors in poke and deferrable modes. A poke WAIT times out
# (soft_fail: skipped); a deferrable WAIT stays deferred.
with DAG("live_backfill", schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
         start_date=datetime(2025, 12, 31, tzinfo=timezone.utc),
         end_date=datetime(2026, 1, 14, tzinfo=timezone.utc), catchup=True,
         max_active_runs=15) as backfill:
    # reschedule mode is left to dag.test() (test_sensor_calendars.py): on this scheduler
    # (Airflow 3.3.2, SQLite, LocalExecutor) a rescheduled sensor can be requeued before the
    # scheduler has processed its executor event, and is then marked FAILED ("state changed
    # externally") whatever the sensor decided; seen at 1 s and 5 s reschedule intervals.
    for mode in ("poke", "deferrable"):
        for scenario in ("a", "b"):
            for propagate in (True, False):
                FivetranDateTimeSensor(
                    task_id=f"{mode}_{scenario}_{str(propagate).lower()}",
                    connector_id=f"live_{scenario}", propagate_failures_forward=propagate,
                    deferrable=mode == "deferrable", recheck_interval=300,
                    poke_interval=1,
                    timeout=3600 if mode == "deferrable" else 2,
                    soft_fail=mode != "deferrable")
'''
RECHECK_LOST = 4
#: The triggerer supervisor's own loop: it writes fired events once per iteration (<= 1 s).
SUPERVISOR_LOOP = 1.0
#: Slack for a 2-core machine shared with other test runs (Airflow's part, not ours).
LOAD_MARGIN = 3.0


@pytest.fixture(scope="module")
def live(airflow_db: Path, redis_proc) -> Iterator[LiveAirflow]:  # type: ignore[no-untyped-def]
    (airflow_db / "dags" / "live_dags.py").write_text(DAG_FILE)
    writer = HistoryWriter(redis.Redis(host=redis_proc.host, port=redis_proc.port), "test:",
                           10 * 365 * 86_400_000)
    for scenario, rows in (("a", SCENARIO_A), ("b", SCENARIO_B)):
        for sid, ended, status in rows:  # before the scheduler starts the backfill
            writer.record(parse_event(encode(payload("sync_end", f"live_{scenario}", ended,
                                                     sync_id=sid, status=status))))
    uri = conn_uri(f"redis://{redis_proc.host}:{redis_proc.port}/0", "test:")
    # INFO: the trigger's decision line (when, and what woke it) is what the tests read.
    with live_airflow(airflow_db, AIRFLOW_ENV, {"AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS": uri,
                                                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO"},
                      ["live_wake", "live_lost", "live_timeout", "live_on_asset",
                       "live_backfill"]) as af:
        yield af


def deferred_and_listening(live: LiveAirflow, client: redis.Redis, dag_id: str,
                           run_id: str) -> None:
    live.trigger(dag_id, run_id)
    live.wait_for("the sensor to defer",
                  lambda: live.ti_state(dag_id, run_id, "wait") == "deferred", timeout=120)
    live.wait_for("a triggerer to take the trigger", lambda: live.query(
        "select 1 from task_instance ti join \"trigger\" t on t.id = ti.trigger_id where "
        "ti.dag_id=? and ti.run_id=? and t.triggerer_id is not null", dag_id, run_id),
        timeout=60)
    live.wait_for("the triggerer to subscribe",
                  lambda: client.execute_command("PUBSUB", "NUMPAT") >= 1, timeout=60)
    time.sleep(2.0)  # the runner starts it within a loop (<= 1 s); it reads once, then waits


def trigger_decided_at(live: LiveAirflow, dag_id: str, run_id: str) -> tuple[float, str]:
    """Return when (epoch s) and why the trigger decided, from its log in the triggerer."""
    import json
    from datetime import datetime

    folder = live.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / "task_id=wait"
    for path in sorted(folder.glob("*trigger*")):
        for line in path.read_text().splitlines():
            if " decided " in line:
                record = json.loads(line)
                when = datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
                how = record["event"].split(" on ", 1)[1].split(":", 1)[0]
                return when.timestamp(), how
    raise AssertionError(f"no decision in the trigger's log under {folder}")


def release_time(live: LiveAirflow, dag_id: str, run_id: str, timeout: float) -> float:
    t0 = time.monotonic()
    t1 = live.wait_for("the trigger to fire",
                       lambda: live.ti_state(dag_id, run_id, "wait") != "deferred",
                       timeout=timeout, every=0.02)
    live.wait_for("the sensor to succeed",
                  lambda: live.ti_state(dag_id, run_id, "wait") in ("success", "failed"),
                  timeout=120)
    assert live.ti_state(dag_id, run_id, "wait") == "success"
    return t1 - t0


class TestBackfillOnRealScheduler:
    def test_seed_calendar_deferrable(self, live) -> None:
        """catchup=True over the seed's January ends with the seed's calendars in all modes.

        WAIT is a poke sensor timing out (soft_fail: skipped) or a deferrable one still
        deferred.

        The history is recorded before the components start (the fixture), and this test
        runs first in the module, so no later sync changes a day's answer.
        """
        names = {"success": "success", "failed": "fail", "deferred": "wait", "skipped": "wait"}

        def states() -> dict[tuple[str, str], str]:
            rows = live.query("select ti.task_id, dr.data_interval_end, ti.state from "
                              "task_instance ti join dag_run dr on dr.run_id = ti.run_id and "
                              "dr.dag_id = ti.dag_id where ti.dag_id = 'live_backfill'")
            return {(str(t), str(end)): str(state) for t, end, state in rows}

        live.wait_for("all 120 sensors to decide or defer", lambda: (
            len(s := states()) == 120 and all(v in names for v in s.values())),
            timeout=900, every=1.0)
        got: dict[str, dict[tuple[str, bool], dict[int, str]]] = {}
        for (task_id, end), state in states().items():
            mode, scenario, propagate = task_id.split("_")
            day = int(end[8:10])
            calendar = got.setdefault(mode, {k: {} for k in CALENDARS})
            calendar[(scenario.upper(), propagate == "true")][day] = names[state]
            if mode == "deferrable":
                assert state != "skipped", task_id
            elif state == "deferred":
                raise AssertionError(f"{task_id} deferred in {mode} mode")
        assert got == {"poke": CALENDARS, "deferrable": CALENDARS}


class TestDeferredOnRealTriggerer:
    def test_sync_arriving_while_deferred_releases_within_a_second(self, live, client,
                                                                   http) -> None:
        """The webhook write publishes; the triggerer's shared listener wakes the trigger.

        Inside the real triggerer the trigger decides within a second of the webhook
        write (its log line says when, and that a change message woke it). The task then
        leaves DEFERRED when the triggerer supervisor next writes events to the database,
        once per loop of up to 1 s: 0.3-0.9 s more on an idle 2-core machine, more under
        load, which is Airflow's and bounded loosely here.
        """
        deferred_and_listening(live, client, "live_wake", "wake1")
        posted = time.time()
        post(http, payload("sync_end", "live_wake", sync_id="s-wake"))
        took = release_time(live, "live_wake", "wake1", timeout=30)
        fired, how = trigger_decided_at(live, "live_wake", "wake1")
        print(f"trigger decided {fired - posted:.3f} s and the task left DEFERRED "
              f"{took:.2f} s after the sync was recorded")
        assert how == "a change message"
        assert fired - posted < 1.0
        assert took < 1.0 + SUPERVISOR_LOOP + LOAD_MARGIN

    def test_lost_publish_releases_within_one_recheck_interval(self, live, client, http,
                                                               monkeypatch) -> None:
        """With the publish lost, the trigger's periodic re-check finds the sync."""
        monkeypatch.setattr(redis.client.Pipeline, "publish", lambda self, *a, **k: self)
        deferred_and_listening(live, client, "live_lost", "lost1")
        post(http, payload("sync_end", "live_lost", sync_id="s-lost"))
        posted = time.time()
        took = release_time(live, "live_lost", "lost1", timeout=30)
        fired, how = trigger_decided_at(live, "live_lost", "lost1")
        print(f"trigger decided {fired - posted:.3f} s and the task left DEFERRED "
              f"{took:.2f} s after the (unpublished) sync was recorded")
        assert how == "the periodic re-check"
        assert fired - posted < RECHECK_LOST + 0.5
        assert took < RECHECK_LOST + SUPERVISOR_LOOP + LOAD_MARGIN

    def test_deferred_wait_times_out_with_the_sensor_timeout(self, live) -> None:
        """The deferral carries the sensor's timeout (the provider's uses execution_timeout,
        None by default, so its deferred wait never ends): nothing synced -> failed."""
        live.trigger("live_timeout", "timeout1")
        live.wait_for("the sensor to defer", lambda: live.ti_state(
            "live_timeout", "timeout1", "wait") == "deferred", timeout=120)
        live.wait_for("the deferral to time out", lambda: live.ti_state(
            "live_timeout", "timeout1", "wait") == "failed", timeout=60)


class TestAssetTriggeredRun:
    def test_target_is_the_triggering_event_sync_end(self, live, http) -> None:
        """A run started by the connector's asset event has no data interval; the sensor's
        target is the event's extra.ended_at, so the sync that triggered it counts."""
        import json
        from datetime import datetime, timedelta, timezone

        from fivetran_events.timeutil import iso

        ended = datetime.now(timezone.utc) - timedelta(minutes=1)
        post(http, payload("sync_end", "live_asset", ended, sync_id="s-asset"))
        live.post_asset_event("fivetran://connector/live_asset",
                              {"sync_id": "s-asset", "ended_at": iso(ended)})
        live.wait_for("the asset-triggered run to succeed", lambda: live.query(
            "select 1 from task_instance where dag_id='live_on_asset' and state='success'"),
            timeout=120, every=0.5)
        ((raw,),) = live.query("select value from xcom where dag_id='live_on_asset' and "
                               "task_id='wait' and key='return_value'")
        value = json.loads(raw)
        value = json.loads(value) if isinstance(value, str) else value
        assert (value["target"], value["sync_id"]) == (iso(ended), "s-asset")
