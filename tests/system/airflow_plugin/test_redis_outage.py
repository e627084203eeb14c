"""When Redis is unreachable: one policy in poke, reschedule and deferrable mode.

Each test stops a redis-server of its own (tests/system/airflow_plugin/outage.py) at the moment
the sensor starts, from its ``on_execute_callback``, and starts it again on the same
port and data when the test says. The history is written through the webhook's view,
signed as Fivetran signs. The real triggerer's side is in ``TestOnRealTriggerer``.
"""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from fivetran_events import Settings
from fivetran_events.timeutil import to_ms
from testkit.airflow_harness import AirflowServer
from testkit.support import SECRET, TOKEN, at, deliver, payload

from .dagtest import run
from .outage import PREFIX, OwnRedis

pytestmark = pytest.mark.filterwarnings("ignore:.*apache/airflow#71172:UserWarning")

CONN_ID = "outage_redis"
MODES = ["poke", "reschedule", "deferrable"]


@pytest.fixture
def outage_http(own_redis: OwnRedis) -> Iterator[Any]:
    """The webhook's view, writing to the dedicated Redis."""
    from webhook_app import create_app

    app = create_app(
        Settings(
            redis_url=own_redis.url, webhook_secrets=[SECRET], api_tokens=[TOKEN], key_prefix=PREFIX
        )
    )
    with app.test_client() as http:
        yield http


@pytest.fixture
def outage_af(
    airflow_db: Any, own_redis: OwnRedis, outage_http: Any, monkeypatch: pytest.MonkeyPatch
) -> OwnRedis:
    """dag.test() with connection ``outage_redis`` on the dedicated Redis, a sync recorded."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", own_redis.conn_uri())
    deliver(outage_http, payload("sync_end", "c1", at(5, 6), sync_id="ok-5"))
    return own_redis


class Seen:
    """What the task's callbacks saw: failures (their exceptions) and retries."""

    def __init__(self) -> None:
        self.failures: list[BaseException | None] = []
        self.retries = 0
        self.stopped = False


def outage_dag(
    dag_id: str,
    mode: str,
    server: OwnRedis,
    seen: Seen,
    *,
    back_after: float | None = None,
    back_on_retry: bool = False,
    **sensor: Any,
) -> Any:
    """One sensor on ``outage_redis``; Redis goes down as the task starts."""
    from airflow.sdk import DAG

    from airflow_plugin.sensors import FivetranDateTimeSensor

    def down(context: Any) -> None:
        # Once: a reschedule or a retry runs the callback again, with Redis meant up.
        if seen.stopped:
            return
        seen.stopped = True
        server.stop()
        if back_after is not None:
            server.back_after(back_after)

    def failed(context: Any) -> None:
        seen.failures.append(context.get("exception"))

    def retried(context: Any) -> None:
        seen.retries += 1
        seen.failures.append(context.get("exception"))
        if back_on_retry:
            server.start()

    kw: dict[str, Any] = {
        "poke_interval": 0.2,
        "timeout": 60,
        "mode": "reschedule" if mode == "reschedule" else "poke",
        "deferrable": mode == "deferrable",
        "recheck_interval": 0.5,
        **sensor,
    }
    with DAG(dag_id, schedule="@daily", start_date=at(1), catchup=False) as dag:
        FivetranDateTimeSensor(
            task_id="s",
            connector_id="c1",
            redis_conn_id=CONN_ID,
            on_execute_callback=down,
            on_failure_callback=failed,
            on_retry_callback=retried,
            **kw,
        )
    return dag


def state_and_sync(out: dict[str, Any]) -> tuple[str, str | None]:
    state, value = out["s"]
    return state, (value or {}).get("sync_id")


@pytest.mark.parametrize("mode", MODES)
class TestInEveryMode:
    def test_an_outage_inside_the_retry_window_is_waited_out(
        self, outage_af: OwnRedis, mode: str
    ) -> None:
        """Redis down for 2 s of the default 60 s window: the same check decides, no error."""
        seen = Seen()
        out = run(outage_dag(f"out_short_{mode}", mode, outage_af, seen, back_after=2.0), at(5))
        assert state_and_sync(out) == ("success", "ok-5")
        assert seen.failures == []

    def test_past_the_window_the_task_fails_and_retries_even_with_soft_fail(
        self, outage_af: OwnRedis, mode: str
    ) -> None:
        """soft_fail does not skip an outage; the task fails, its retry counts the sync."""
        from airflow_plugin.exceptions import FivetranHistoryUnavailable

        seen = Seen()
        dag = outage_dag(
            f"out_retry_{mode}",
            mode,
            outage_af,
            seen,
            back_on_retry=True,
            redis_retry_timeout=1,
            soft_fail=True,
            retries=1,
            retry_delay=timedelta(seconds=1),
        )
        out = run(dag, at(5))
        assert state_and_sync(out) == ("success", "ok-5")
        assert seen.retries == 1
        (exc,) = seen.failures
        assert isinstance(exc, FivetranHistoryUnavailable), repr(exc)
        for part in (
            "connector c1",
            f"127.0.0.1:{outage_af.port}/0",
            CONN_ID,
            "unreachable after retrying for 1s",
        ):
            assert part in str(exc), (part, str(exc))

    def test_without_retries_the_task_fails(self, outage_af: OwnRedis, mode: str) -> None:
        seen = Seen()
        out = run(
            outage_dag(f"out_fail_{mode}", mode, outage_af, seen, redis_retry_timeout=0.5), at(5)
        )
        assert state_and_sync(out) == ("failed", None)
        assert type(seen.failures[0]).__name__ == "FivetranHistoryUnavailable"

    def test_never_fail_skips(self, outage_af: OwnRedis, mode: str) -> None:
        seen = Seen()
        out = run(
            outage_dag(
                f"out_never_{mode}", mode, outage_af, seen, redis_retry_timeout=0.5, never_fail=True
            ),
            at(5),
        )
        assert state_and_sync(out) == ("skipped", None)

    def test_silent_fail_keeps_waiting_until_redis_is_back(
        self, outage_af: OwnRedis, mode: str
    ) -> None:
        """Windows of 0.5 s run out during a 3 s outage; silent_fail waits on regardless."""
        seen = Seen()
        t0 = time.monotonic()
        out = run(
            outage_dag(
                f"out_silent_{mode}",
                mode,
                outage_af,
                seen,
                back_after=3.0,
                redis_retry_timeout=0.5,
                silent_fail=True,
            ),
            at(5),
        )
        assert state_and_sync(out) == ("success", "ok-5")
        assert seen.failures == []
        assert time.monotonic() - t0 >= 3.0


def trigger(server: OwnRedis, **kwargs: Any) -> Any:
    from airflow_plugin.triggers.decision import FivetranSyncDecisionTrigger

    return FivetranSyncDecisionTrigger(
        "c1", to_ms(at(10)), redis_conn_id=CONN_ID, **{"recheck_interval": 0.5, **kwargs}
    )


async def first_event(t: Any) -> dict[str, Any]:
    async for ev in t.run():
        return ev.payload  # type: ignore[no-any-return]
    raise AssertionError("the trigger ended without an event")


class TestTrigger:
    """The trigger on an asyncio loop, as the triggerer runs it."""

    def test_reports_an_outage_past_its_window(self, outage_af: OwnRedis) -> None:
        """It retries for retry_timeout, then fires an ``unavailable`` event (not silence)."""
        outage_af.stop()

        async def body() -> tuple[dict[str, Any], float]:
            t0 = time.monotonic()
            ev = await asyncio.wait_for(first_event(trigger(outage_af, retry_timeout=1.5)), 30)
            return ev, time.monotonic() - t0

        ev, took = asyncio.run(body())
        assert ev["status"] == "unavailable"
        assert ev["target_ms"] == to_ms(at(10))
        assert f"127.0.0.1:{outage_af.port}/0" in ev["message"] and CONN_ID in ev["message"]
        assert 1.5 <= took < 15  # the window, plus the listener's first subscribe wait

    def test_an_outage_while_waiting_is_reported_without_waiting_for_a_recheck(
        self, outage_af: OwnRedis
    ) -> None:
        """Redis stops while the trigger waits (re-check in 600 s): losing the listener
        wakes it, and it reports after its retry window."""

        async def body() -> tuple[dict[str, Any], float]:
            task = asyncio.create_task(
                first_event(trigger(outage_af, retry_timeout=1.5, recheck_interval=600))
            )
            await asyncio.sleep(1.0)  # subscribed, read once (WAIT), now waiting
            assert not task.done()
            outage_af.stop()
            t0 = time.monotonic()
            ev = await asyncio.wait_for(task, 30)
            return ev, time.monotonic() - t0

        ev, took = asyncio.run(body())
        assert ev["status"] == "unavailable"
        assert took < 10, took

    def test_without_a_window_it_retries_until_redis_is_back(
        self, outage_af: OwnRedis, outage_http: Any
    ) -> None:
        """retry_timeout=None (silent_fail): an outage never ends the wait; Redis's return does."""
        outage_af.stop()

        async def body() -> dict[str, Any]:
            task = asyncio.create_task(first_event(trigger(outage_af, retry_timeout=None)))
            await asyncio.sleep(3.0)
            assert not task.done(), task.result()
            outage_af.start()
            # A client of its own: the fixture's is bound to the context outside this loop.
            deliver(
                outage_http.application.test_client(),
                payload("sync_end", "c1", at(11), sync_id="after"),
            )
            return await asyncio.wait_for(task, 30)

        ev = asyncio.run(body())
        assert ev["status"] == "success" and ev["decision"]["sync"]["sync_id"] == "after"


OUTAGE_DAG = """
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG

from airflow_plugin.sensors import FivetranDateTimeSensor

with DAG("outage_deferred", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False) as dag:
    FivetranDateTimeSensor(task_id="wait", connector_id="c_live", deferrable=True,
                           redis_conn_id="outage_redis", target_time="2026-01-10T00:00:00Z",
                           recheck_interval=300, redis_retry_timeout=3, soft_fail=True,
                           timeout=600, retries=1, retry_delay=timedelta(seconds=5))
"""


def _first_try_log(airflow3: AirflowServer, run_id: str) -> str:
    return "".join(
        p.read_text(errors="replace")
        for p in (airflow3.home / "logs" / "dag_id=outage_deferred").glob(
            f"run_id={run_id}/task_id=wait/attempt=1.log"
        )
    )


def _resume_never_ran(log: str) -> bool:
    """True when try 1's last segment is the task runner's first line alone.

    ``::group::Pre Execute`` is the task process's first line, written before it waits
    for its startup message; a segment with nothing after it is a process Airflow's
    supervisor killed before starting it, so our code did not run in it.
    """
    lines = [ln for ln in log.splitlines() if ln.strip()]
    return bool(lines) and "::group::Pre Execute" in lines[-1]


def _outage_run(airflow3: AirflowServer, own_redis: OwnRedis, outage_http: Any, run_id: str) -> str:
    """One run of ``outage_deferred``: deferred, Redis stopped, the try fails, Redis
    back, a sync, the retry passes. Returns try 1's log, final once the retry ended."""
    airflow3.trigger("outage_deferred", run_id)

    def state() -> str | None:
        return airflow3.ti_state("outage_deferred", run_id, "wait")

    airflow3.wait_for("the sensor to defer", lambda: state() == "deferred", timeout=120)
    airflow3.wait_for(
        "the triggerer to subscribe",
        lambda: any(int(c.get("psub", 0)) for c in own_redis.client().client_list()),
        timeout=60,
    )

    own_redis.stop()
    stopped = time.monotonic()
    airflow3.wait_for(
        "the try to fail",
        lambda: state() in ("up_for_retry", "failed", "skipped", "success"),
        timeout=90,
        interval=0.1,
    )
    assert state() == "up_for_retry", state()
    assert time.monotonic() - stopped >= 3.0

    own_redis.start()
    deliver(outage_http, payload("sync_end", "c_live", at(11), sync_id="s-live"))
    airflow3.wait_for("the retry to end", lambda: state() in ("success", "failed"), timeout=120)
    assert state() == "success"
    ((tries,),) = airflow3.query(
        "select try_number from task_instance where dag_id='outage_deferred' and run_id=%s",
        run_id,
    )
    assert tries == 2
    # Try 1's supervisor wrote its last lines before reporting the try's end, so the
    # file is final by now.
    return _first_try_log(airflow3, run_id)


@pytest.mark.slow
class TestOnRealTriggerer:
    def test_outage_while_deferred_fails_the_try_and_the_retry_counts_the_sync(
        self, airflow3: AirflowServer, own_redis: OwnRedis, outage_http: Any
    ) -> None:
        """Deferred in the real triggerer, Redis stops: the trigger reports after its window
        (3 s), the try fails (soft_fail does not skip it), Redis starts again on the same
        port and data, a sync arrives, and the retry passes on it."""
        conn = {
            "connection_id": CONN_ID,
            "conn_type": "redis",
            "host": "127.0.0.1",
            "port": own_redis.port,
            "extra": json.dumps({"key_prefix": PREFIX}),
        }
        airflow3.request("DELETE", f"/api/v2/connections/{CONN_ID}")
        resp = airflow3.request("POST", "/api/v2/connections", json=conn)
        assert resp.status_code == 201, (resp.status_code, resp.text)
        try:
            airflow3.add_dag("outage_deferred.py", OUTAGE_DAG)
            airflow3.wait_for_parsed("outage_deferred")
            log = _outage_run(airflow3, own_redis, outage_http, "outage1")
            if _resume_never_ran(log):
                # Airflow killed the resumed process before it started (its supervisor
                # does so when the execution API's ``start`` fails), so none of our code
                # ran in that segment (seen in CI at 37b1e25). Once more on a fresh
                # history, saying so in the warnings summary; a second loss fails.
                warnings.warn(
                    "outage1: Airflow did not start try 1's resumed process; again as "
                    "outage2. Scheduler log:\n" + airflow3.logs("scheduler", tail=30),
                    stacklevel=1,
                )
                own_redis.client().flushdb()
                log = _outage_run(airflow3, own_redis, outage_http, "outage2")
            assert "FivetranHistoryUnavailable" in log and "unreachable" in log, (
                log[-3000:] + "\n" + airflow3.logs("scheduler", tail=60)
            )
        finally:
            airflow3.request("DELETE", f"/api/v2/connections/{CONN_ID}")


class TestShortCircuitOperator:
    """The short-circuit operator reads the history under the sensor's policy too."""

    @staticmethod
    def dag(dag_id: str, server: OwnRedis, seen: Seen, **op: Any) -> Any:
        from airflow.sdk import DAG, CronDataIntervalTimetable

        from airflow_plugin.operators.sync import FivetranSyncShortCircuitOperator

        def down(context: Any) -> None:
            server.stop()
            server.back_after(2.0)

        def failed(context: Any) -> None:
            seen.failures.append(context.get("exception"))

        with DAG(
            dag_id,
            schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
            start_date=at(1),
            catchup=False,
        ) as dag:
            FivetranSyncShortCircuitOperator(
                task_id="s",
                connector_id="c1",
                redis_conn_id=CONN_ID,
                on_execute_callback=down,
                on_failure_callback=failed,
                **op,
            )
        return dag

    def test_a_short_outage_is_ridden_out(self, outage_af: OwnRedis) -> None:
        """Redis back after 2 s of the 60 s window: the success recorded still counts."""
        seen = Seen()
        out = run(self.dag("sc_out_short", outage_af, seen), at(5))
        assert out["s"][0] == "success" and seen.failures == []

    def test_past_the_window_it_fails_naming_the_outage(self, outage_af: OwnRedis) -> None:
        seen = Seen()
        out = run(self.dag("sc_out_long", outage_af, seen, redis_retry_timeout=0.5), at(5))
        assert out["s"][0] == "failed"
        (exc,) = seen.failures
        assert type(exc).__name__ == "FivetranHistoryUnavailable", repr(exc)
        assert "unreachable after retrying for 0.5s" in str(exc)
