"""A FAIL decision ends the task alike in poke, reschedule and deferrable mode.

The policy (docs/sensor.md, "When the sync failed"): ``never_fail`` skips the task; otherwise it
fails with ``FivetranSyncFailed`` and ``retries`` apply. ``soft_fail`` is for a sensor
that timed out and leaves a FAIL failed, as Airflow's poke loop does. A FAIL is a
decision, not an error, so ``silent_fail`` (which keeps a sensor waiting through errors
such as an unreachable Redis) does not turn it into a wait. Deferred, the same holds
whether the FAIL is found before deferring or by the trigger.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from testkit.support import at, payload
from testkit.support import deliver as post

from .dagtest import run

pytestmark = pytest.mark.filterwarnings("ignore:.*apache/airflow#71172:UserWarning")

MODES = ["poke", "reschedule", "deferrable"]
#: flag given to the sensor -> the task's end state on a FAIL decision
FLAGS = {None: "failed", "soft_fail": "failed", "never_fail": "skipped", "silent_fail": "failed"}


class Seen:
    def __init__(self) -> None:
        self.failures: list[BaseException | None] = []


def fail_dag(dag_id: str, mode: str, seen: Seen, flag: str | None, **extra: Any) -> Any:
    from airflow.sdk import DAG

    from airflow_plugin.sensors import FivetranDateTimeSensor

    kw: dict[str, Any] = {
        "poke_interval": 0.2,
        "timeout": 30,
        "mode": "reschedule" if mode == "reschedule" else "poke",
        "deferrable": mode == "deferrable",
        "recheck_interval": 0.5,
        **extra,
    }
    if flag is not None:
        kw[flag] = True
    with DAG(dag_id, schedule="@daily", start_date=at(1), catchup=False) as dag:
        FivetranDateTimeSensor(
            task_id="s",
            connector_id="c1",
            target_time=at(5).isoformat(),
            on_failure_callback=lambda ctx: seen.failures.append(ctx.get("exception")),
            **kw,
        )
    return dag


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("flag", list(FLAGS))
def test_a_failed_sync_after_the_target(
    dagtest_airflow: Any, http: Any, mode: str, flag: str | None
) -> None:
    """The history holds a failure after the target: same end state in every mode."""
    from airflow_plugin.exceptions import FivetranSyncFailed

    post(http, payload("sync_end", "c1", at(6), sync_id="f6", status="FAILURE"))
    seen = Seen()
    started = time.monotonic()
    out = run(fail_dag(f"fail_{mode}_{flag}", mode, seen, flag), at(5))
    state, _ = out["s"]
    assert state == FLAGS[flag], (mode, flag, state, seen.failures)
    if state == "failed":
        (exc,) = seen.failures
        assert isinstance(exc, FivetranSyncFailed), repr(exc)
        assert "f6" in str(exc)
    # Decided at the first check, not after waiting out the sensor's 30 s timeout.
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("flag", list(FLAGS))
def test_a_failure_found_by_the_trigger(dagtest_airflow: Any, app: Any, flag: str | None) -> None:
    """Deferred first (nothing recorded yet), then a failure arrives: same end states."""
    from airflow_plugin.exceptions import FivetranSyncFailed

    def fail_later() -> None:
        with app.test_client() as http:  # a client of the timer thread's own
            post(http, payload("sync_end", "c1", at(6), sync_id="f6", status="FAILURE"))

    seen = Seen()
    timer = threading.Timer(1.5, fail_later)
    timer.start()
    try:
        out = run(fail_dag(f"fail_trigger_{flag}", "deferrable", seen, flag), at(5))
    finally:
        timer.cancel()
        timer.join()
    state, _ = out["s"]
    assert state == FLAGS[flag], (flag, state, seen.failures)
    if state == "failed":
        (exc,) = seen.failures
        assert isinstance(exc, FivetranSyncFailed), repr(exc)
