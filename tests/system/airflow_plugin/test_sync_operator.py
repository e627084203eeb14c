"""FivetranSyncOperator: trigger a sync in Fivetran's stand-in, wait for its webhook.

The stand-in (testkit/fivetran_api.py) runs each sync for a set time and POSTs its signed
``sync_start``/``sync_end`` to the real webhook server (gunicorn), which records them in
the suite's Redis; the operator's wait is woken by that record. First the wait itself on
an asyncio loop (as the triggerer runs it), then whole DAGs on the session's Airflow 3,
deferred and in the task's process, with the webhook delivered and with it silenced.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from fivetran_events import HistoryReader, HistoryWriter
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.timeutil import now_ms, parse_iso, to_ms
from testkit.airflow_harness import AirflowServer
from testkit.fivetran_api import FivetranStandIn
from testkit.support import at
from testkit.support import ev as event_of

from .dagtest import run, sync

pytestmark = pytest.mark.slow

PREFIX = "test:"
DAY_MS = 86_400_000
KEY, API_SECRET = "key", "secret"


def reader(url: str) -> HistoryReader:
    return HistoryReader(redis.Redis.from_url(url), PREFIX, DAY_MS)


# --- The wait, on an asyncio loop -------------------------------------------------------


def wait(url: str, api: FivetranStandIn, connector_id: str, asked: int, **kwargs: Any) -> Any:
    from airflow_plugin.hooks import HistoryConfig
    from airflow_plugin.triggers.sync import FivetranSyncRequestTrigger

    trigger = FivetranSyncRequestTrigger(connector_id, asked, recheck_interval=30, **kwargs)
    cfg = HistoryConfig(url=url, key_prefix=PREFIX, max_sync_duration_ms=DAY_MS)
    client = FivetranClient(KEY, API_SECRET, api.url)
    return asyncio.run(asyncio.wait_for(trigger.wait(cfg, lambda: client), 60))


class TestTheWait:
    def test_the_webhook_of_the_requested_sync_answers(
        self, dagtest_airflow: Path, history_url: str, api: FivetranStandIn
    ) -> None:
        """Success on the sync started after the request, with no API call while waiting."""
        api.connector("wait_ok")
        asked = now_ms()
        FivetranClient(KEY, API_SECRET, api.url).sync_connection("wait_ok")
        event = wait(history_url, api, "wait_ok", asked)
        assert event["status"] == "success", event
        sync = event["decision"]["sync"]
        assert to_ms(parse_iso(sync["started_at"])) >= asked
        assert sync["sync_id"] == api.started[-1][1]
        assert api.total_calls == 1  # the request; the wait read nothing from Fivetran

    def test_fail_when_overdue_after_fails_a_wait_on_a_late_connector(
        self,
        dagtest_airflow: Path,
        history_url: str,
        api: FivetranStandIn,
        writer: HistoryWriter,
        client: redis.Redis,
    ) -> None:
        """Hourly, last success on Jan 1: the wait fails at its first look, naming how late."""
        from fivetran_events.freshness import Schedule
        from fivetran_events.history.writer import record_schedules

        api.connector("wait_late")
        writer.record(event_of(connector_id="wait_late", created=at(1, 6), sync_id="old"))
        record_schedules(client, PREFIX, {"wait_late": Schedule(60, schedule_type="auto")})
        event = wait(history_url, api, "wait_late", now_ms(), fail_when_overdue_after=3600)
        assert event["status"] == "fail" and "overdue by" in event["message"], event
        assert "due at 2026-01-01T07:15:00.000Z" in event["message"]

    def test_a_request_made_during_a_sync_asks_again_after_it(
        self, dagtest_airflow: Path, history_url: str, api: FivetranStandIn
    ) -> None:
        """Two requests at once: the second, made while the first's sync ran, is told to
        ask again when that sync ends, and then ends on a sync of its own."""
        api.connector("wait_two")
        c = FivetranClient(KEY, API_SECRET, api.url)
        c.sync_connection("wait_two")
        first_sync = api.started[-1]
        second_asked = now_ms()
        c.sync_connection("wait_two")  # Fivetran starts nothing: one is running
        assert api.started[-1] == first_sync
        event = wait(history_url, api, "wait_two", second_asked, running_at_ask=True)
        assert event["status"] == "ask_again", event
        assert event["decision"]["sync"]["sync_id"] == first_sync[1]
        asked_again = now_ms()
        c.sync_connection("wait_two")
        event = wait(history_url, api, "wait_two", asked_again)
        assert event["status"] == "success", event
        assert event["decision"]["sync"]["sync_id"] not in (first_sync[1],)
        assert to_ms(parse_iso(event["decision"]["sync"]["started_at"])) >= asked_again

    def test_a_failed_sync_fails_with_fivetrans_status_and_reason(
        self, dagtest_airflow: Path, history_url: str, api: FivetranStandIn
    ) -> None:
        api.connector("wait_fail")
        api.next_status = "FAILURE_WITH_TASK"
        try:
            asked = now_ms()
            FivetranClient(KEY, API_SECRET, api.url).sync_connection("wait_fail")
            event = wait(history_url, api, "wait_fail", asked)
        finally:
            api.next_status = "SUCCESSFUL"
        assert event["status"] == "fail", event
        assert "FAILURE_WITH_TASK: the stand-in was told to fail" in event["message"]

    def test_silenced_webhook_falls_back_to_fivetrans_api(
        self, dagtest_airflow: Path, history_url: str, api: FivetranStandIn
    ) -> None:
        """Nothing recorded for fallback_after: the connection's succeeded_at answers."""
        api.connector("wait_silent")
        api.silent = True
        asked = now_ms()
        FivetranClient(KEY, API_SECRET, api.url).sync_connection("wait_silent")
        event = wait(history_url, api, "wait_silent", asked, fallback_after=1.0, poll_frequency=0.5)
        assert event["status"] == "success" and event["reconciled"] is True, event
        assert event["decision"]["sync"]["sync_id"].startswith("~")
        assert api.calls["GET /v1/connections/{id}"] >= 1

    def test_deferred_the_answer_is_held_until_min_deferral(
        self, dagtest_airflow: Path, history_url: str, api: FivetranStandIn
    ) -> None:
        """run(), the triggerer's path, answers no sooner than min_deferral seconds after
        the task deferred (Airflow's scheduler must have read the exit on defer() first);
        a task that deferred longer ago than that is answered at once."""
        from airflow_plugin.triggers.sync import FivetranSyncRequestTrigger

        api.connector("wait_held")
        asked = now_ms()
        FivetranClient(KEY, API_SECRET, api.url).sync_connection("wait_held")
        assert wait(history_url, api, "wait_held", asked)["status"] == "success"

        async def answered_after(deferred_ms: int) -> tuple[float, dict[str, Any]]:
            t = FivetranSyncRequestTrigger(
                "wait_held", asked, deferred_ms=deferred_ms, min_deferral=1.5
            )
            start = asyncio.get_running_loop().time()
            async for ev in t.run():
                return asyncio.get_running_loop().time() - start, ev.payload
            raise AssertionError("the trigger ended without an event")

        held, event = asyncio.run(asyncio.wait_for(answered_after(now_ms()), 30))
        assert event["status"] == "success" and 1.4 <= held < 5, (held, event)
        at_once, event = asyncio.run(asyncio.wait_for(answered_after(now_ms() - 10_000), 30))
        assert event["status"] == "success" and at_once < 1.0, (at_once, event)


class TestRescheduled:
    def test_the_fallback_asks_a_rescheduled_manual_connection_again_when_due(
        self, dagtest_airflow: Path, conn: FivetranStandIn
    ) -> None:
        """No webhook; the sync ends RESCHEDULED: the task asks again at Fivetran's
        ``status.rescheduled_for`` and ends on the sync that follows."""
        from airflow_plugin.operators.sync import FivetranSyncOperator

        api = conn
        api.connector("resched")
        api.silent, api.next_status, api.reschedule_seconds = True, "RESCHEDULED", 1.0
        api.on_sync_end = lambda cid, ended: setattr(api, "next_status", "SUCCESSFUL")
        op = FivetranSyncOperator(
            task_id="t",
            connector_id="resched",
            deferrable=False,
            fallback_after=1,
            poll_frequency=0.5,
            recheck_interval=30,
        )
        got = op.execute({})
        assert got["status"] == "SUCCESSFUL" and got["reconciled"] is True, got
        assert api.calls["POST /v1/connections/{id}/sync"] == 2, api.calls


class TestAsking:
    def test_a_connector_name_is_looked_up_once_with_one_call_each(
        self, dagtest_airflow: Path, conn: FivetranStandIn
    ) -> None:
        """Groups by destination name, then that group's connections by schema name."""
        from airflow_plugin.exceptions import ConnectorNameError
        from airflow_plugin.operators.sync import FivetranSyncOperator

        conn.group("g_wh", "Warehouse")
        conn.group("g_other", "Other")
        conn.connector("named_1", group_id="g_wh", schema="orders")
        conn.connector("named_2", group_id="g_other", schema="orders")
        op = FivetranSyncOperator(
            task_id="t", connector_name="orders", destination_name="Warehouse"
        )
        op._resolve_connector()
        op._resolve_connector()
        assert op.connector_id == "named_1"
        assert dict(conn.calls) == {"GET /v1/groups": 1, "GET /v1/connections": 1}
        missing = FivetranSyncOperator(
            task_id="t", connector_name="orders", destination_name="Nowhere"
        )
        with pytest.raises(ConnectorNameError, match="no destination"):
            missing._resolve_connector()

    def test_asking_reads_once_sets_the_schedule_type_and_requests(
        self, dagtest_airflow: Path, conn: FivetranStandIn
    ) -> None:
        from airflow_plugin.operators.sync import FivetranSyncOperator

        conn.connector("ask_auto")
        conn.connectors["ask_auto"]["schedule_type"] = "auto"
        op = FivetranSyncOperator(task_id="t", connector_id="ask_auto")
        asked, running, refused = op._ask()
        assert running is False and refused is False and asked <= now_ms()
        assert dict(conn.calls) == {
            "GET /v1/connections/{id}": 1,
            "PATCH /v1/connections/{id}": 1,
            "POST /v1/connections/{id}/sync": 1,
        }
        assert conn.connectors["ask_auto"]["schedule_type"] == "manual"

    def test_a_broken_connection_is_not_asked_unless_wait_when_broken(
        self, dagtest_airflow: Path, conn: FivetranStandIn
    ) -> None:
        """Fivetran's setup_state broken: fail before asking; wait_when_broken asks anyway."""
        from airflow_plugin.exceptions import FivetranSyncFailed
        from airflow_plugin.operators.sync import FivetranSyncOperator

        conn.connector("ask_broken", setup_state="broken")
        with pytest.raises(FivetranSyncFailed, match="broken"):
            FivetranSyncOperator(task_id="t", connector_id="ask_broken")._ask()
        assert "POST /v1/connections/{id}/sync" not in conn.calls
        FivetranSyncOperator(task_id="t", connector_id="ask_broken", wait_when_broken=True)._ask()
        assert conn.calls["POST /v1/connections/{id}/sync"] == 1

    def test_the_resync_operator_asks_for_a_resync_of_its_scope(
        self, dagtest_airflow: Path, conn: FivetranStandIn
    ) -> None:
        from airflow_plugin.operators.sync import FivetranResyncOperator

        conn.connector("ask_resync")
        op = FivetranResyncOperator(
            task_id="t", connector_id="ask_resync", scope={"public": ["orders"]}
        )
        op._ask()
        assert conn.calls["POST /v1/connections/{id}/resync"] == 1
        assert conn.started[-1][0] == "ask_resync" and conn.started[-1][3] == "resync"

    def test_a_schedule_change_runs_no_setup_tests(
        self, dagtest_airflow: Path, conn: FivetranStandIn
    ) -> None:
        from airflow_plugin.operators.sync import FivetranSyncOperator

        conn.connector("ask_tests")
        conn.connectors["ask_tests"]["schedule_type"] = "auto"
        FivetranSyncOperator(task_id="t", connector_id="ask_tests")._ask()
        assert conn.calls["PATCH /v1/connections/{id}"] == 1 and conn.setup_tests == 0


def resync_op(connector_id: str, **kwargs: Any) -> Any:
    from airflow_plugin.operators.sync import FivetranResyncOperator

    kwargs = {"deferrable": False, "recheck_interval": 30, **kwargs}
    return FivetranResyncOperator(task_id="t", connector_id=connector_id, **kwargs)


class TestResync:
    """A resync is asked for once: Fivetran completes a running sync first (or answers
    409), so asking again after that sync would start a second historical resync."""

    def resyncs(self, api: FivetranStandIn, cid: str) -> list[str]:
        return [s[1] for s in api.started if s[0] == cid and s[3] == "resync"]

    @pytest.mark.parametrize(("conflict", "asked"), [(False, 1), (True, 2)])
    def test_asked_during_a_sync_it_ends_on_the_resync_asked_once_or_after_a_409(
        self, dagtest_airflow: Path, conn: FivetranStandIn, conflict: bool, asked: int
    ) -> None:
        """Accepted, the resync is never asked again; refused (409), it is asked once
        more after the running sync's end. Either way one resync runs and answers."""
        cid = f"rs_{conflict}"
        conn.connector(cid)
        conn.resync_conflict = conflict
        FivetranClient(KEY, API_SECRET, conn.url).sync_connection(cid)
        got = resync_op(cid).execute({})
        assert conn.calls["POST /v1/connections/{id}/resync"] == asked, conn.calls
        assert [got["sync_id"]] == self.resyncs(conn, cid), (got, conn.started)

    def test_a_rescheduled_resync_goes_on_with_a_sync_request(
        self, dagtest_airflow: Path, conn: FivetranStandIn
    ) -> None:
        """Due at its rescheduledAt, a manual connection's resync is run on by the sync
        endpoint (the only way it syncs), not by a second resync."""
        conn.connector("rs_resched")
        conn.next_status, conn.reschedule_seconds = "RESCHEDULED", 1.0
        conn.on_sync_end = lambda cid, ended: setattr(conn, "next_status", "SUCCESSFUL")
        got = resync_op("rs_resched").execute({})
        assert got["status"] == "SUCCESSFUL", got
        assert conn.calls["POST /v1/connections/{id}/resync"] == 1, conn.calls
        assert conn.calls["POST /v1/connections/{id}/sync"] == 1, conn.calls

    def test_a_second_409_fails_the_task(
        self, dagtest_airflow: Path, conn: FivetranStandIn
    ) -> None:
        from airflow_plugin.exceptions import FivetranSyncFailed

        conn.connector("rs_409_twice")
        conn.resync_conflict = True
        FivetranClient(KEY, API_SECRET, conn.url).sync_connection("rs_409_twice")
        op = resync_op("rs_409_twice")
        assert op._ask()[2] is True  # refused: wait for the running sync, then once more
        with pytest.raises(FivetranSyncFailed, match="refused again"):
            op._ask({"status": "ask_again", "conflict": True})
        assert self.resyncs(conn, "rs_409_twice") == []


class TestSkipIfSynced:
    def test_a_run_already_synced_triggers_nothing_and_returns_that_sync(
        self, dagtest_airflow: Path, http: FlaskClient, api: FivetranStandIn
    ) -> None:
        """A success after data_interval_end: no Fivetran call, the XCom is that sync."""
        from airflow.sdk import DAG
        from airflow.timetables.interval import CronDataIntervalTimetable

        from airflow_plugin.operators.sync import FivetranSyncOperator

        sync(http, "skip_c", at(10, 6), sync_id="ok-10", started=at(10, 5))
        with DAG(
            "sync_skip",
            schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
            start_date=at(1),
            catchup=False,
        ) as dag:
            FivetranSyncOperator(
                task_id="sync", connector_id="skip_c", skip_if_synced_after_data_interval_end=True
            )
        out = run(dag, at(9))  # its data interval ends at(10), before the sync
        state, value = out["sync"]
        assert state == "success" and value["sync_id"] == "ok-10", out
        assert api.total_calls == 0


# --- Whole DAGs on the session's Airflow 3 ------------------------------------------------

DAG_FILE = """
from datetime import datetime, timezone

from airflow.sdk import DAG

from airflow_plugin.operators.sync import FivetranSyncOperator

with DAG("sync_op", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False) as dag:
    FivetranSyncOperator(task_id="deferred", connector_id="af_sync", recheck_interval=60)
    FivetranSyncOperator(task_id="in_process", connector_id="af_sync", deferrable=False,
                         recheck_interval=60)

with DAG("sync_op_fallback", schedule=None,
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False) as dag:
    FivetranSyncOperator(task_id="deferred", connector_id="af_silent", fallback_after=3,
                         poll_frequency=1, recheck_interval=60)
    FivetranSyncOperator(task_id="in_process", connector_id="af_silent_2", deferrable=False,
                         fallback_after=3, poll_frequency=1, recheck_interval=60)
"""


@pytest.fixture(scope="module")
def airflow(fivetran_airflow: AirflowServer) -> AirflowServer:
    fivetran_airflow.add_dag("sync_op_dags.py", DAG_FILE)
    fivetran_airflow.wait_for_parsed("sync_op", "sync_op_fallback")
    return fivetran_airflow


def return_value(airflow: AirflowServer, dag_id: str, task_id: str) -> dict[str, Any]:
    """The task's XCom return value of run ``r1``, through Airflow's REST API."""
    path = f"/api/v2/dags/{dag_id}/dagRuns/r1/taskInstances/{task_id}/xcomEntries/return_value"
    resp = airflow.get(path, params={"deserialize": "true"})
    assert resp.status_code == 200, resp.text
    value = resp.json()["value"]
    return dict(json.loads(value) if isinstance(value, str) else value)


def run_to_the_end(airflow: AirflowServer, dag_id: str, tasks: tuple[str, ...]) -> None:
    airflow.trigger(dag_id, "r1")

    def finished() -> bool:
        states = [airflow.ti_state(dag_id, "r1", t) for t in tasks]
        return all(s in ("success", "failed") for s in states)

    airflow.wait_for(f"{dag_id}'s tasks to finish", finished, timeout=240)
    for t in tasks:
        assert airflow.ti_state(dag_id, "r1", t) == "success", airflow.logs("triggerer")


class TestOnAirflow:
    def test_both_modes_at_once_each_end_on_a_sync_started_after_it_asked(
        self, airflow: AirflowServer, api: FivetranStandIn, history_url: str
    ) -> None:
        """Deferred and in-process tasks trigger one connector together; both succeed,
        each on a sync that started after it asked (one may have asked again)."""
        api.connector("af_sync")
        run_to_the_end(airflow, "sync_op", ("deferred", "in_process"))
        for task in ("deferred", "in_process"):
            got = return_value(airflow, "sync_op", task)
            assert got["status"] == "SUCCESSFUL" and got["reconciled"] is False, got
            assert parse_iso(got["started_at"]) >= parse_iso(got["asked_at"]), got
            assert got["sync_id"] in {s[1] for s in api.started}
        syncs = api.calls["POST /v1/connections/{id}/sync"]
        reads = api.calls["GET /v1/connections/{id}"]
        assert syncs == reads and syncs in (2, 3), api.calls  # one ask each, one asked again

    def test_with_the_webhook_silenced_the_fallback_answers(
        self, airflow: AirflowServer, api: FivetranStandIn, history_url: str
    ) -> None:
        """No webhook: after fallback_after the tasks read Fivetran's connection, succeed,
        and the reconciled end is recorded in the history, marked as derived."""
        api.connector("af_silent")
        api.connector("af_silent_2")
        api.silent = True
        run_to_the_end(airflow, "sync_op_fallback", ("deferred", "in_process"))
        for task, cid in (("deferred", "af_silent"), ("in_process", "af_silent_2")):
            got = return_value(airflow, "sync_op_fallback", task)
            assert got["reconciled"] is True and got["sync_id"].startswith("~"), got
            recorded = reader(history_url).syncs(cid)
            assert [s["sync_id"] for s in recorded] == [got["sync_id"]]
            assert recorded[0]["sync_id_derived"] is True
            assert recorded[0]["source"] == "reconciled"
