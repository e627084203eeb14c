"""The session's Airflow harness itself: a component that died is started again before the
next test, so one test's crash does not fail every later test on that Airflow."""

from __future__ import annotations

import os
import signal

import pytest

from testkit.airflow_harness import AirflowServer


def test_a_dead_scheduler_is_started_again(airflow3: AirflowServer) -> None:
    """SIGKILL the scheduler's process group (a crash, not a stop); revive() starts it
    again and Airflow reports it healthy."""
    proc = airflow3.procs["scheduler"]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=20)
    with pytest.warns(UserWarning, match="scheduler had exited"):
        assert airflow3.revive() == ["scheduler"]
    assert airflow3.procs["scheduler"].poll() is None
    assert airflow3.revive() == []
