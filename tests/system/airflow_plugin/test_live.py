"""The sensor on the session's real Airflow: scheduler, triggerer, task processes.

dag.test() cannot show these: the seed backfill run by the scheduler in all three
modes, a deferred sensor released by the webhook's publish (or, with the publish lost,
by its re-check), a task process killed and retried, an asset-triggered run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import redis
from flask.testing import FlaskClient
from pytest_redis.executor import RedisExecutor

from fivetran_events import Settings
from fivetran_events.timeutil import iso
from testkit.airflow_harness import AirflowServer
from testkit.calendars import CALENDARS, SCENARIO_A, SCENARIO_B
from testkit.support import (
    SECRET,
    TOKEN,
    at,
    deliver,
    lose_change_messages,
    pattern_listeners,
    payload,
)

from .dagtest import sync

pytestmark = pytest.mark.slow

DAG_FILE = """
from datetime import datetime, timezone

from airflow.sdk import DAG, CronDataIntervalTimetable

from airflow_plugin.plugin import connector_asset
from airflow_plugin.sensors import FivetranDateTimeSensor

# These two time the wake itself, so their syncs end seconds after the deferral with no
# hold (min_deferral=0); the hold is test_trigger.py's and test_astronomer.py's.
for name, recheck in (("live_wake", 300), ("live_lost", 4)):
    with DAG(name, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
             catchup=False) as dag:
        FivetranDateTimeSensor(task_id="wait", connector_id=name, deferrable=True,
                               recheck_interval=recheck, timeout=600, min_deferral=0)
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

# The seed's January backfill, run by the scheduler: the 6 @daily runs whose targets
# (Jan 9..14) cross every change of the calendars (the last successes, the failures, the
# waits after them), each with the four scenario/flag sensors in poke, reschedule and
# deferrable modes; the seed's whole month is decided in process (test_sensor_calendars.py).
# A poke WAIT times out (soft_fail: skipped); a deferrable WAIT stays deferred.
with DAG("live_backfill", schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
         start_date=datetime(2026, 1, 8, tzinfo=timezone.utc),
         end_date=datetime(2026, 1, 13, tzinfo=timezone.utc), catchup=True,
         max_active_runs=6) as backfill:
    for mode in ("poke", "reschedule", "deferrable"):
        for scenario in ("a", "b"):
            for propagate in (True, False):
                FivetranDateTimeSensor(
                    task_id=f"{mode}_{scenario}_{str(propagate).lower()}",
                    connector_id=f"live_{scenario}", propagate_failures_forward=propagate,
                    deferrable=mode == "deferrable", recheck_interval=300,
                    mode="reschedule" if mode == "reschedule" else "poke",
                    # reschedule: one 15 s reschedule, then the timeout (soft_fail). Not
                    # shorter: Airflow 3.2-3.3 fails a rescheduled sensor whose previous
                    # poke's executor event is processed after it was queued again
                    # (apache/airflow#71172), and a busy 2-core scheduler lags seconds.
                    poke_interval=15 if mode == "reschedule" else 1,
                    timeout={"poke": 2, "reschedule": 5, "deferrable": 3600}[mode],
                    soft_fail=mode != "deferrable")
"""
#: The targets (January days) of live_backfill's runs.
BACKFILL_DAYS = range(9, 15)
RECHECK_LOST = 4
#: The triggerer supervisor's own loop: it writes fired events once per iteration (<= 1 s).
SUPERVISOR_LOOP = 1.0
#: Slack for a 2-core machine shared with other test runs (Airflow's part, not ours).
LOAD_MARGIN = 3.0


LIVE_DAGS = (
    "live_wake",
    "live_lost",
    "live_timeout",
    "live_on_asset",
    "live_backfill",
    "live_restart",
)


@pytest.fixture(scope="module")
def live(airflow3: AirflowServer, redis_proc: RedisExecutor) -> Iterator[AirflowServer]:
    """The session's Airflow with this module's DAGs parsed and the seed history written.

    The session's Airflow reads the history at prefix ``test:`` of the suite's Redis
    (testkit/airflow_harness.py). The history is written before the DAG file exists, so
    the backfill's first poke already sees all of it; it goes through the webhook's view
    (signed as Fivetran signs), as in production. Afterwards every run still going
    is failed, so no deferred sensor keeps the triggerer listening on the suite's Redis
    for the tests that follow.
    """
    from webhook_app import create_app

    url = f"redis://{redis_proc.host}:{redis_proc.port}/0"
    client = redis.Redis.from_url(url)
    app = create_app(
        Settings(redis_url=url, webhook_secrets=[SECRET], api_tokens=[TOKEN], key_prefix="test:")
    )
    with app.test_client() as http:  # signed POSTs through the webhook's view
        for scenario, rows in (("a", SCENARIO_A), ("b", SCENARIO_B)):
            for sid, ended, status in rows:
                deliver(
                    http, payload("sync_end", f"live_{scenario}", ended, sync_id=sid, status=status)
                )
    airflow3.add_dag("live_dags.py", DAG_FILE)
    airflow3.wait_for_parsed(*LIVE_DAGS[:-1])
    yield airflow3
    for dag_id, run_id in airflow3.query(
        "select dag_id, run_id from dag_run where state in ('queued', 'running') and "
        "dag_id = any(%s)",
        list(LIVE_DAGS),
    ):
        resp = airflow3.request(
            "PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", json={"state": "failed"}
        )
        assert resp.status_code == 200, (resp.status_code, resp.text)
    airflow3.wait_for(
        "the triggerer to stop listening", lambda: pattern_listeners(client) == 0, timeout=120
    )


def return_value(live: AirflowServer, dag_id: str, task_id: str = "wait") -> dict[str, str]:
    """The XCom return value of the DAG's only run's task (JSONB in the metadata DB)."""
    ((raw,),) = live.query(
        "select value from xcom where dag_id=%s and task_id=%s and key='return_value'",
        dag_id,
        task_id,
    )
    return json.loads(raw) if isinstance(raw, str) else raw  # type: ignore[no-any-return]


def task_log(live: AirflowServer, dag_id: str, attempt: int, task_id: str = "wait") -> str:
    """The task's log of one attempt ("" until it exists); the DAG has a single run."""
    paths = sorted(
        (live.home / "logs" / f"dag_id={dag_id}").glob(
            f"run_id=*/task_id={task_id}/attempt={attempt}.log"
        )
    )
    return "".join(p.read_text(errors="replace") for p in paths)


def deferred_and_listening(
    live: AirflowServer, client: redis.Redis, dag_id: str, run_id: str
) -> None:
    live.trigger(dag_id, run_id)
    live.wait_for(
        "the sensor to defer",
        lambda: live.ti_state(dag_id, run_id, "wait") == "deferred",
        timeout=120,
    )
    live.wait_for(
        "a triggerer to take the trigger",
        lambda: live.query(
            'select 1 from task_instance ti join "trigger" t on t.id = ti.trigger_id where '
            "ti.dag_id=%s and ti.run_id=%s and t.triggerer_id is not null",
            dag_id,
            run_id,
        ),
        timeout=60,
    )
    live.wait_for("the triggerer to subscribe", lambda: pattern_listeners(client) >= 1, timeout=60)
    time.sleep(2.0)  # the runner starts it within a loop (<= 1 s); it reads once, then waits


def trigger_decided_at(live: AirflowServer, dag_id: str, run_id: str) -> tuple[float, str]:
    """Return when (epoch s) and why the trigger decided, from its log in the triggerer."""
    folder = live.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / "task_id=wait"
    for path in sorted(folder.glob("*trigger*")):
        for line in path.read_text().splitlines():
            if " decided " in line:
                record = json.loads(line)
                when = datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
                how = record["event"].split(" on ", 1)[1].split(":", 1)[0]
                return when.timestamp(), how
    raise AssertionError(f"no decision in the trigger's log under {folder}")


def release_time(live: AirflowServer, dag_id: str, run_id: str, timeout: float) -> float:
    t0 = time.monotonic()
    live.wait_for(
        "the trigger to fire",
        lambda: live.ti_state(dag_id, run_id, "wait") != "deferred",
        timeout=timeout,
        interval=0.02,
    )
    t1 = time.monotonic()
    live.wait_for(
        "the sensor to succeed",
        lambda: live.ti_state(dag_id, run_id, "wait") in ("success", "failed"),
        timeout=120,
    )
    state = live.ti_state(dag_id, run_id, "wait")
    if state != "success":  # the task's own log says why (a resumed sensor has two tries' worth)
        folder = live.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / "task_id=wait"
        tails = (f"--- {f.name}\n{f.read_text(errors='replace')[-4000:]}" for f in folder.iterdir())
        logs = "\n".join(sorted(tails))
        raise AssertionError(f"the sensor ended {state}:\n{logs}\n{live.logs(tail=40)}")
    return t1 - t0


class TestBackfillOnRealScheduler:
    def test_seed_calendar_in_all_three_modes(self, live: AirflowServer) -> None:
        """catchup=True over the seed's January ends with the seed's calendars in all modes.

        WAIT is a poke or reschedule sensor timing out (soft_fail: skipped) or a
        deferrable one still deferred. Every reschedule-mode WAIT was really rescheduled
        (Airflow recorded a reschedule for it) before timing out.

        The history is recorded before the DAG file is written (the fixture), and this
        test runs first in the module, so no later sync changes a day's answer.
        """
        names = {"success": "success", "failed": "fail", "deferred": "wait", "skipped": "wait"}
        total = 3 * len(CALENDARS) * len(BACKFILL_DAYS)

        def states() -> dict[tuple[str, str], str]:
            rows = live.query(
                "select ti.task_id, dr.data_interval_end, ti.state from "
                "task_instance ti join dag_run dr on dr.run_id = ti.run_id and "
                "dr.dag_id = ti.dag_id where ti.dag_id = 'live_backfill'"
            )
            return {(str(t), str(end)): str(state) for t, end, state in rows}

        live.wait_for(
            f"all {total} sensors to decide or defer",
            lambda: len(s := states()) == total and all(v in names for v in s.values()),
            timeout=900,
            interval=1.0,
        )
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
        expected = {k: {d: cal[d] for d in BACKFILL_DAYS} for k, cal in CALENDARS.items()}
        assert got == {"poke": expected, "reschedule": expected, "deferrable": expected}

        rescheduled = {
            (str(t), str(end))
            for t, end in live.query(
                "select distinct ti.task_id, dr.data_interval_end from task_reschedule tr "
                "join task_instance ti on ti.id = tr.ti_id join dag_run dr on "
                "dr.run_id = ti.run_id and dr.dag_id = ti.dag_id where ti.dag_id = 'live_backfill'"
            )
        }
        waited = {
            k for k, v in states().items() if k[0].startswith("reschedule_") and v == "skipped"
        }
        assert waited and waited <= rescheduled
        assert all(t.startswith("reschedule_") for t, _ in rescheduled)


class TestDeferredOnRealTriggerer:
    def test_sync_arriving_while_deferred_releases_within_a_second(
        self, live: AirflowServer, client: redis.Redis, http: FlaskClient
    ) -> None:
        """The webhook write publishes; the triggerer's shared listener wakes the trigger.

        Inside the real triggerer the trigger decides within a second of the webhook
        write (its log line says when, and that a change message woke it). The task then
        leaves DEFERRED when the triggerer supervisor next writes events to the database,
        once per loop of up to 1 s: 0.3-0.9 s more on an idle 2-core machine, more under
        load, which is Airflow's and bounded loosely here.
        """
        deferred_and_listening(live, client, "live_wake", "wake1")
        posted = time.time()
        deliver(http, payload("sync_end", "live_wake", sync_id="s-wake"))
        took = release_time(live, "live_wake", "wake1", timeout=30)
        fired, how = trigger_decided_at(live, "live_wake", "wake1")
        print(
            f"trigger decided {fired - posted:.3f} s and the task left DEFERRED "
            f"{took:.2f} s after the sync was recorded"
        )
        assert how == "a change message"
        assert fired - posted < 1.0
        assert took < 1.0 + SUPERVISOR_LOOP + LOAD_MARGIN

    def test_lost_publish_releases_within_one_recheck_interval(
        self,
        live: AirflowServer,
        client: redis.Redis,
        http: FlaskClient,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """With the publish lost, the trigger's periodic re-check finds the sync."""
        lose_change_messages(monkeypatch)
        deferred_and_listening(live, client, "live_lost", "lost1")
        deliver(http, payload("sync_end", "live_lost", sync_id="s-lost"))
        posted = time.time()
        took = release_time(live, "live_lost", "lost1", timeout=30)
        fired, how = trigger_decided_at(live, "live_lost", "lost1")
        print(
            f"trigger decided {fired - posted:.3f} s and the task left DEFERRED "
            f"{took:.2f} s after the (unpublished) sync was recorded"
        )
        assert how == "the periodic re-check"
        assert fired - posted < RECHECK_LOST + 0.5
        assert took < RECHECK_LOST + SUPERVISOR_LOOP + LOAD_MARGIN

    def test_deferred_wait_times_out_with_the_sensor_timeout(self, live: AirflowServer) -> None:
        """The deferral carries the sensor's timeout (the provider's uses execution_timeout,
        None by default, so its deferred wait never ends): nothing synced -> failed."""
        live.trigger("live_timeout", "timeout1")
        live.wait_for(
            "the sensor to defer",
            lambda: live.ti_state("live_timeout", "timeout1", "wait") == "deferred",
            timeout=120,
        )
        live.wait_for(
            "the deferral to time out",
            lambda: live.ti_state("live_timeout", "timeout1", "wait") == "failed",
            timeout=60,
        )


class TestAssetTriggeredRun:
    def test_target_is_the_triggering_event_sync_end(
        self, live: AirflowServer, http: FlaskClient
    ) -> None:
        """A run started by the connector's asset event has no data interval; the sensor's
        target is the event's extra.ended_at, so the sync that triggered it counts."""
        ended = datetime.now(timezone.utc) - timedelta(minutes=1)
        deliver(http, payload("sync_end", "live_asset", ended, sync_id="s-asset"))
        live.post_asset_event(
            "fivetran://connector/live_asset", {"sync_id": "s-asset", "ended_at": iso(ended)}
        )
        live.wait_for(
            "the asset-triggered run to succeed",
            lambda: live.query(
                "select 1 from task_instance where dag_id='live_on_asset' and state='success'"
            ),
            timeout=120,
            interval=0.5,
        )
        value = return_value(live, "live_on_asset")
        assert (value["target"], value["sync_id"]) == (iso(ended), "s-asset")


RESTART_DAG = """
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, CronDataIntervalTimetable

from airflow_plugin.sensors import FivetranDateTimeSensor

# One scheduled run: the day of 2026-02-01, so the sensor's target is 2026-02-02T00:00Z.
with DAG("live_restart", schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
         start_date=datetime(2026, 2, 1, tzinfo=timezone.utc),
         end_date=datetime(2026, 2, 1, tzinfo=timezone.utc), catchup=True) as dag:
    FivetranDateTimeSensor(task_id="wait", connector_id="live_restart", poke_interval=1,
                           timeout=600, retries=1, retry_delay=timedelta(seconds=2))
"""


class TestKilledAndRetried:
    def test_the_retry_waits_for_the_same_target(
        self, live: AirflowServer, http: FlaskClient
    ) -> None:
        """A sensor's task process killed mid-wait; a sync arrives; the retry counts it.

        The target is the run's data_interval_end, not "the next sync after I started":
        the retry keeps the first try's target, so the sync that ended after it while no
        task ran releases the retry at once. (The provider's sensor takes its baseline
        from the API when it starts, so its retry would wait for yet another sync.)
        """
        target = iso(datetime(2026, 2, 2, tzinfo=timezone.utc))
        sync(http, "live_restart", at(1, 12, month=2), sync_id="s-before")
        live.add_dag("live_restart.py", RESTART_DAG)
        live.wait_for_parsed("live_restart")
        live.wait_for(
            "the first try to wait",
            lambda: (
                f"target {target}" in (log := task_log(live, "live_restart", 1))
                and "waiting:" in log
            ),
            timeout=180,
        )

        ((pid, try_number),) = live.query(
            "select pid, try_number from task_instance where dag_id='live_restart'"
        )
        # The task process is a descendant of the scheduler this suite started (its session).
        assert os.getsid(pid) == live.procs["scheduler"].pid, pid
        os.kill(pid, signal.SIGKILL)
        live.wait_for(
            "the killed try to be up for retry",
            lambda: live.query(
                "select 1 from task_instance where dag_id='live_restart' and state='up_for_retry'"
            ),
            timeout=60,
            interval=0.1,
        )

        sync(http, "live_restart", at(2, 6, month=2), sync_id="s-new")
        live.wait_for(
            "the retry to end",
            lambda: live.query(
                "select 1 from task_instance where dag_id='live_restart' and "
                "state in ('success', 'failed')"
            ),
            timeout=120,
        )
        ((state, retried),) = live.query(
            "select state, try_number from task_instance where dag_id='live_restart'"
        )
        assert (state, retried) == ("success", try_number + 1)
        assert f"target {target}" in task_log(live, "live_restart", retried)
        value = return_value(live, "live_restart")
        assert (value["target"], value["sync_id"]) == (target, "s-new")
