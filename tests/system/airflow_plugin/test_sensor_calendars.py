"""The seed's January backfill through dag.test(): the calendars in every sensor mode.

History is written the way production writes it: signed POSTs to the webhook. Each
January day and flag value gets its own copy of the scenario under its own connector id
(the sensor's ``connector_id`` is templated on the run's day), so that releasing one
deferred WAIT cannot change another run's answer.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from testkit.calendars import CALENDARS, SCENARIO_A, SCENARIO_B, S, W
from testkit.support import at, pattern_listeners

from .dagtest import run, sync

# Short reschedule intervals keep dag.test() fast; the scheduler race they warn of
# does not exist in dag.test(), which runs every poke in this process.
pytestmark = pytest.mark.filterwarnings("ignore:.*apache/airflow#71172:UserWarning")

DAYS = range(1, 16)
SENSORS = {
    ("A", True): "a_prop",
    ("A", False): "a_noprop",
    ("B", True): "b_prop",
    ("B", False): "b_noprop",
}


def write_scenarios(http: Any) -> None:
    for (scenario, _), variant in SENSORS.items():
        for day in DAYS:
            for sid, ended, status in SCENARIO_A if scenario == "A" else SCENARIO_B:
                sync(http, f"{variant}_{day}", ended, status, sync_id=sid)


def backfill_dag(mode: str, scenario: str, propagate: bool) -> Any:
    """A @daily DAG with data intervals, one sensor (so a deferred run has one trigger)."""
    from airflow.sdk import DAG, CronDataIntervalTimetable

    from airflow_plugin.sensors import FivetranDateTimeSensor

    with DAG(
        f"calendar_{mode}_{SENSORS[(scenario, propagate)]}",
        schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
        start_date=at(1),
        catchup=True,
    ) as dag:
        FivetranDateTimeSensor(
            task_id="wait_for_fivetran",
            connector_id=f"{SENSORS[(scenario, propagate)]}_{{{{ data_interval_end.day }}}}",
            propagate_failures_forward=propagate,
            mode="reschedule" if mode == "reschedule" else "poke",
            deferrable=mode == "deferrable",
            poke_interval=0.2,
            timeout=1,
            recheck_interval=30,
            soft_fail=True,
        )
    return dag


@contextlib.contextmanager
def releasing(app: Any, client: Any, connector_id: str, enabled: bool) -> Iterator[list[str]]:
    """Once the sensor's trigger subscribes (it deferred), record a new success for it."""
    released: list[str] = []
    done = threading.Event()
    # Count pattern-subscribed connections, not patterns: a real triggerer elsewhere in
    # the session may already listen on the same pattern.
    before = pattern_listeners(client)

    def loop() -> None:
        http = app.test_client()  # a Flask test client belongs to one thread
        while not done.is_set() and not released:
            if pattern_listeners(client) > before:
                sync(http, connector_id, at(20), sync_id="release")
                released.append(connector_id)
            time.sleep(0.05)

    t = threading.Thread(target=loop, daemon=True)
    if enabled:
        t.start()
    try:
        yield released
    finally:
        done.set()
        if enabled:
            t.join(5)


def outcome(state: str, value: Any, released: bool) -> str:
    if released:  # it deferred, and the new success released it: it was waiting
        assert state == "success" and value["sync_id"] == "release", (state, value)
        return W
    return {"success": S, "failed": "fail", "skipped": W}[state]


@pytest.mark.slow
class TestSeedBackfill:
    @pytest.mark.parametrize("mode", ["poke", "reschedule", "deferrable"])
    def test_calendar(
        self, dagtest_airflow: Path, app: Flask, http: FlaskClient, client: redis.Redis, mode: str
    ) -> None:
        """Every January run ends with the seed's outcome, for both propagate values.

        poke/reschedule: a WAIT times out (soft_fail: skipped). deferrable: a WAIT defers,
        and a success recorded while it is deferred releases it through the trigger.
        """
        write_scenarios(http)
        for (scenario, propagate), variant in SENSORS.items():
            dag = backfill_dag(mode, scenario, propagate)
            got: dict[int, str] = {}
            for day in DAYS:
                connector = f"{variant}_{day}"
                with releasing(app, client, connector, mode == "deferrable") as released:
                    out = run(dag, at(day))
                assert out["_run"].data_interval_end == at(day)
                state, value = out["wait_for_fivetran"]
                got[day] = outcome(state, value, bool(released))
                if state == "success" and not released:
                    assert value["target"] == f"2026-01-{day:02d}T00:00:00.000Z"
            assert got == CALENDARS[(scenario, propagate)], (scenario, propagate)
