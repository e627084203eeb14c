"""astronomer's example DAGs on real Airflow 3, only their import lines pointing at us.

testkit/astronomer_dags/ holds DAGs of the shape of astronomer's ``dev/dags/``
(``example_fivetran``, ``example_fivetran_without_connector_id``,
``example_fivetran_xcom``, ``example_fivetran_resync``) importing
``airflow_plugin.astronomer``. Each is added to the session's Airflow alone; its first
(scheduled) run triggers syncs in Fivetran's stand-in, whose signed webhooks reach the
real webhook server, and must succeed on syncs that ended after the run began, with
the trigger and one read per sync from Fivetran's API (and the name lookup). First the
adapters' own behaviour, in this process, on the same stand-in and history.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from flask.testing import FlaskClient

import testkit
from fivetran_events.timeutil import iso, now_ms, parse_iso, to_ms
from testkit.airflow_harness import AirflowServer
from testkit.fivetran_api import FivetranStandIn
from testkit.processes import poll_until
from testkit.support import at

from .dagtest import sync

pytestmark = pytest.mark.slow

DAGS = Path(testkit.__file__).parent / "astronomer_dags"
#: The connector the example DAGs sync, by id and by name (schema) in its destination.
CID, SCHEMA, GROUP, DESTINATION = "astro_c", "astro_schema", "astro_g", "Astro Warehouse"
TRIGGER_AND_READ = {"GET /v1/connections/{id}": 1, "POST /v1/connections/{id}/sync": 1}
NAME_LOOKUP = {"GET /v1/groups": 1, "GET /v1/connections": 1}


def context(run_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="d", run_id=run_id, task_id="s", map_index=-1)
    return {"ti": ti}


def sensor(**kwargs: Any) -> Any:
    from airflow_plugin.astronomer import FivetranSensor

    return FivetranSensor(task_id="s", deferrable=False, **kwargs)


def ended(api: FivetranStandIn, sync_id: str) -> datetime:
    return poll_until(lambda: api.ended.get(sync_id), f"sync {sync_id} to end", 30)[0]


class TestTheSensorWithoutATime:
    def test_it_waits_for_a_completion_after_the_latest_at_its_first_try_kept_by_retries(
        self, dagtest_airflow: Path, http: FlaskClient
    ) -> None:
        """Target: just after the latest completion recorded when the task first ran; a
        retry (a new process, a newer completion recorded meanwhile) keeps it."""
        sync(http, "wait_next", at(10, 6), sync_id="old")
        first = sensor(connector_id="wait_next")
        assert first._target_ms(context("r1")) == to_ms(at(10, 6)) + 1
        assert first.poke(context("r1")).is_done is False
        sync(http, "wait_next", at(11, 6), sync_id="new")
        retry = sensor(connector_id="wait_next")
        assert retry._target_ms(context("r1")) == to_ms(at(10, 6)) + 1
        assert retry.poke(context("r1")).is_done is True
        # Another run's first try waits past the newer one.
        assert sensor(connector_id="wait_next")._target_ms(context("r2")) == to_ms(at(11, 6)) + 1

    def test_with_nothing_recorded_it_waits_from_its_first_try(
        self, dagtest_airflow: Path, http: FlaskClient
    ) -> None:
        before = now_ms()
        target = sensor(connector_id="wait_none")._target_ms(context("r1"))
        assert before <= target <= now_ms()


class TestTheSensorWithATime:
    """``completed_after_time`` decides as our sensor does, with astronomer's defaults:
    the seed's calendar A (success Jan 10, failure Jan 12)."""

    @pytest.mark.parametrize(
        ("day", "propagate", "outcome"),
        [(9, False, "done"), (11, False, "fail"), (14, False, "wait"), (14, True, "fail")],
    )
    def test_calendar_a(
        self, dagtest_airflow: Path, http: FlaskClient, day: int, propagate: bool, outcome: str
    ) -> None:
        from airflow_plugin.exceptions import FivetranSyncFailed

        sync(http, "cal_a", at(10, 6), sync_id="ok-10")
        sync(http, "cal_a", at(12, 6), "FAILURE", sync_id="fail-12")
        kwargs: dict[str, Any] = {"propagate_failures_forward": True} if propagate else {}
        s = sensor(connector_id="cal_a", completed_after_time=at(day).isoformat(), **kwargs)
        if outcome == "fail":
            with pytest.raises(FivetranSyncFailed):
                s.poke(context("r1"))
        else:
            assert s.poke(context("r1")).is_done is (outcome == "done")


class TestTheSensorAfterARescheduledSync:
    @pytest.mark.parametrize(("wait_time", "next_look"), [(None, 3600.0), (7, 7.0)])
    def test_reschedule_wait_time_replaces_fivetrans_rescheduled_at(
        self, dagtest_airflow: Path, http: FlaskClient, wait_time: int | None, next_look: float
    ) -> None:
        """In poke and reschedule mode the next look after a RESCHEDULED end is at
        Fivetran's rescheduledAt, or ``reschedule_wait_time`` seconds later when given."""
        now = datetime.now(timezone.utc)
        later = iso(now + timedelta(hours=1))
        sync(http, "resched_s", now, "RESCHEDULED", sync_id="r", rescheduledAt=later)
        s = sensor(
            connector_id="resched_s",
            completed_after_time=iso(now - timedelta(minutes=1)),
            reschedule_wait_time=wait_time,
        )
        assert s.poke(context("r1")).is_done is False
        pause = s._get_next_poke_interval(now, lambda: 0.0, 1)
        assert next_look - 5 <= pause <= next_look, pause


class TestTheOperatorsTimeFeedsTheSensor:
    def test_not_waiting_it_returns_a_time_the_sensor_waits_from_for_its_sync(
        self, dagtest_airflow: Path, http: FlaskClient, conn: FivetranStandIn
    ) -> None:
        """astronomer's example_fivetran_xcom: the returned time makes the sensor wait for
        the sync the operator asked for, not for the one that ended before."""
        from airflow_plugin.astronomer import FivetranOperator

        conn.connector("xcom_c")
        sync(http, "xcom_c", datetime.now(timezone.utc), sync_id="before")
        asked = FivetranOperator(
            task_id="t", connector_id="xcom_c", wait_for_completion=False
        ).execute({})
        assert isinstance(asked, str) and dict(conn.calls) == TRIGGER_AND_READ
        waiting = sensor(connector_id="xcom_c", completed_after_time=asked)
        assert waiting.poke(context("r1")).is_done is False
        ended(conn, conn.started[-1][1])
        poll_until(lambda: waiting.poke(context("r1")).is_done, "the sensor to pass", 30)
        assert dict(conn.calls) == TRIGGER_AND_READ  # the sensor called nothing


class TestTheOperatorInItsProcess:
    def test_deferrable_false_waits_in_the_task_and_returns_the_syncs_end(
        self, dagtest_airflow: Path, conn: FivetranStandIn
    ) -> None:
        from airflow_plugin.astronomer import FivetranOperator

        conn.connector("in_process")
        got = FivetranOperator(task_id="t", connector_id="in_process", deferrable=False).execute({})
        assert got == iso(ended(conn, conn.started[-1][1]))
        assert dict(conn.calls) == TRIGGER_AND_READ


class TestWithoutTheHistorysConnection:
    def test_the_operator_fails_before_asking_fivetran_for_anything(
        self, airflow_db: Path, conn: FivetranStandIn, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from airflow_plugin.astronomer import FivetranOperator
        from airflow_plugin.compat import AirflowFailException

        monkeypatch.delenv("AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS", raising=False)
        conn.connector("no_history")
        op = FivetranOperator(task_id="t", connector_id="no_history")
        with pytest.raises(AirflowFailException, match=r"fivetran_events_redis.*fivetran_default"):
            op.execute({})
        with pytest.raises(AirflowFailException, match="AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS"):
            sensor(connector_id="no_history").execute({})
        assert conn.total_calls == 0


# --- astronomer's example DAGs on the session's Airflow 3 --------------------------------


@pytest.fixture(scope="module")
def airflow(fivetran_airflow: AirflowServer, fivetran: FivetranStandIn) -> AirflowServer:
    """The session's Airflow with the Variables astronomer's examples read."""
    fivetran.group(GROUP, DESTINATION)
    fivetran.connector(CID, group_id=GROUP, schema=SCHEMA)
    variables = {"connector_id": CID, "connector_name": SCHEMA, "destination_name": DESTINATION}
    for key, value in variables.items():
        body = {"key": key, "value": value}
        resp = fivetran_airflow.request("POST", "/api/v2/variables", json=body)
        if resp.status_code == 409:
            resp = fivetran_airflow.request("PATCH", f"/api/v2/variables/{key}", json=body)
        assert resp.status_code in (200, 201), resp.text
    return fivetran_airflow


def utc(when: datetime | None) -> datetime:
    assert when, "no time recorded"
    return when.astimezone(timezone.utc)


def run_example(airflow: AirflowServer, filename: str, dag_id: str) -> tuple[str, datetime]:
    """Add the example's DAG; return its first run's id and start once it succeeded."""
    airflow.add_dag(filename, (DAGS / filename).read_text())

    def finished() -> tuple[str, str, datetime] | None:
        rows = airflow.query(
            "select run_id, state, start_date from dag_run where dag_id=%s", dag_id
        )
        return rows[0] if rows and rows[0][1] in ("success", "failed") else None

    run_id, state, started = airflow.wait_for(f"{dag_id}'s first run", finished, timeout=240)
    assert state == "success", airflow.logs("triggerer") + airflow.logs("scheduler")
    return run_id, utc(started)


def task(airflow: AirflowServer, dag_id: str, run_id: str, task_id: str) -> tuple[Any, datetime]:
    """The task's XCom return value and when it ended."""
    rows = airflow.query(
        "select end_date from task_instance where dag_id=%s and run_id=%s and task_id=%s",
        dag_id,
        run_id,
        task_id,
    )
    path = (
        f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value"
    )
    resp = airflow.get(path, params={"deserialize": "true"})
    value = resp.json()["value"] if resp.status_code == 200 else None
    return (json.loads(value) if isinstance(value, str) and value[:1] == '"' else value), utc(
        rows[0][0]
    )


def syncs_since(api: FivetranStandIn, since: datetime, how: str = "sync") -> list[str]:
    return [s[1] for s in api.started if s[0] == CID and s[2] >= since and s[3] == how]


class TestAstronomersExamples:
    @pytest.mark.parametrize(
        ("filename", "dag_id", "lookup"),
        [
            ("example_fivetran.py", "example_fivetran", {}),
            (
                "example_fivetran_without_connector_id.py",
                "example_fivetran_without_conn_id",
                NAME_LOOKUP,
            ),
        ],
    )
    def test_the_operator_ends_on_the_sync_it_asked_for(
        self,
        airflow: AirflowServer,
        api: FivetranStandIn,
        filename: str,
        dag_id: str,
        lookup: dict[str, int],
    ) -> None:
        """XCom: the end of a sync started in this run; the trigger, one read, the lookup."""
        run_id, began = run_example(airflow, filename, dag_id)
        value, _ = task(airflow, dag_id, run_id, "fivetran_task")
        (mine,) = syncs_since(api, began)
        assert value == iso(ended(api, mine)) and parse_iso(value) > began
        assert dict(api.calls) == {**TRIGGER_AND_READ, **lookup}

    def test_the_xcom_example_waits_for_the_sync_its_operator_asked_for(
        self, airflow: AirflowServer, api: FivetranStandIn, http: FlaskClient
    ) -> None:
        """The operator returns at once with the time it asked; the sensor, deferred,
        passes on that sync's webhook, not on the older end recorded before the run."""
        api.sync_seconds = 12.0  # longer than the DAG's 5 s delay: the sensor defers
        sync(http, CID, datetime.now(timezone.utc), sync_id="before-the-run")
        run_id, began = run_example(airflow, "example_fivetran_xcom.py", "example_fivetran_xcom")
        (mine,) = syncs_since(api, began)
        value, sensor_ended = task(airflow, "example_fivetran_xcom", run_id, "fivetran-sensor")
        assert value is None and sensor_ended >= ended(api, mine) > began
        asked, _ = task(airflow, "example_fivetran_xcom", run_id, "fivetran-operator")
        assert parse_iso(asked) >= began
        assert dict(api.calls) == TRIGGER_AND_READ

    def test_the_resync_example_ends_each_task_on_a_resync_started_in_the_run(
        self, airflow: AirflowServer, api: FivetranStandIn
    ) -> None:
        """Two resyncs asked; each task ends on one of them (the second request can
        find the first's resync started after it asked: that one counts for both)."""
        run_id, began = run_example(
            airflow, "example_fivetran_resync.py", "example_fivetran_resync"
        )
        ends = {
            t: task(airflow, "example_fivetran_resync", run_id, t)[0]
            for t in ("fivetran_resync_all", "fivetran_resync_scoped")
        }
        resyncs = syncs_since(api, began, "resync")
        assert len(resyncs) == 2, api.started
        assert set(ends.values()) <= {iso(ended(api, s)) for s in resyncs}, (ends, api.ended)
        assert api.calls["POST /v1/connections/{id}/resync"] == 2
        assert api.calls["GET /v1/connections/{id}"] == 2
        assert api.total_calls == 4, api.calls
