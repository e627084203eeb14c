"""``fivetran-events worker`` runs a pool: one slow answer from Airflow holds up nothing else.

Real redis-server, the real Flask app, real worker processes (testkit/worker_process.py);
Airflow 2 is the stand-in (testkit/airflow2_standin.py), which can hold one sync's POST.
Processes are found and checked by PID (``/proc``), never by name.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Worker

from fivetran_events import Settings
from fivetran_events.deliveries import Delivery, DeliveryState
from fivetran_events.keys import delivery_id
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import (
    CID,
    URI,
    post_event,
)
from testkit.processes import poll_until
from testkit.worker_process import WorkerProcess
from webhook_app.forwarding.forwarder import Forwarder

pytestmark = pytest.mark.timeout(120)

#: Seconds the stand-in holds the slow sync's POST (Airflow's timeout is 10 s).
HOLD_S = 6.0


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def delivery(fw: Forwarder, sync_id: str) -> Delivery | None:
    return fw.store.get(delivery_id(CID, sync_id, URI))


def delivered(fw: Forwarder, sync_id: str) -> bool:
    d = delivery(fw, sync_id)
    return d is not None and d.state is DeliveryState.DELIVERED


def pool_up(worker: WorkerProcess, client: redis.Redis, size: int) -> list[int]:
    """Wait until the pool's ``size`` members run and are registered with RQ."""

    def up() -> list[int] | None:
        pids = worker.members()
        return pids if len(pids) == size == len(Worker.all(connection=client)) else None

    return poll_until(up, f"{size} pool members", 60, details=worker.log)


def busy_members(client: redis.Redis) -> list[int]:
    """The PIDs of the workers running a job now."""
    return [w.pid for w in Worker.all(connection=client) if w.get_current_job_id() and w.pid]


@pytest.mark.slow
class TestNoHeadOfLineBlocking:
    def test_a_held_post_does_not_hold_another_syncs_delivery(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn, tmp_path: Path
    ) -> None:
        """While Airflow holds one sync's POST, the next sync's delivery goes through at
        once: the default ``fivetran-events worker`` attempts deliveries side by side."""
        standin.hold_syncs["slow"] = HOLD_S
        worker = WorkerProcess(fw.settings, tmp_path)
        try:
            post_event(http, sync_id="slow")
            poll_until(
                lambda: standin.uncommitted == 1,
                "the slow POST held",
                60,
                details=worker.log,
            )
            sent = time.monotonic()
            post_event(http, sync_id="quick")
            poll_until(lambda: delivered(fw, "quick"), "quick delivered", 3, details=worker.log)
            took = time.monotonic() - sent
            assert standin.uncommitted == 1 and not delivered(fw, "slow")
            poll_until(lambda: delivered(fw, "slow"), "slow delivered", 30, details=worker.log)
        finally:
            worker.stop()
        print(f"quick delivered {took * 1000:.0f} ms after its ack, while slow was held")
        assert [p["extra"]["sync_id"] for p in standin.posts] == ["slow", "quick"]


@pytest.mark.slow
class TestPoolProcesses:
    @pytest.mark.parametrize(
        ("sig", "size", "code"), [(signal.SIGTERM, 3, 0), (signal.SIGKILL, 2, -signal.SIGKILL)]
    )
    def test_stopping_the_pool_leaves_no_member_running(
        self, fw: Forwarder, client: redis.Redis, tmp_path: Path, sig: int, size: int, code: int
    ) -> None:
        """SIGTERM to the pool alone (not its group) stops it and every member; after a
        SIGKILL of the pool (no chance to stop anything) its members stop by themselves."""
        worker = WorkerProcess(fw.settings, tmp_path, args=("--concurrency", str(size)))
        try:
            pids = pool_up(worker, client, size)
            os.kill(worker.pid, sig)
            assert worker.proc.wait(timeout=30) == code, worker.log()
            poll_until(
                lambda: not any(alive(p) for p in pids), "members gone", 20, details=worker.log
            )
        finally:
            worker.stop()
        if sig == signal.SIGTERM:  # stopped warm: each told RQ it is gone
            assert Worker.all(connection=client) == []

    def test_a_killed_members_delivery_is_taken_over(
        self,
        http: Any,
        settings: Settings,
        fw: Forwarder,
        client: redis.Redis,
        standin: Airflow2StandIn,
        tmp_path: Path,
    ) -> None:
        """SIGKILL of the member posting s1: the pool starts another, the lease runs out,
        a member finds the event Airflow committed and records it: one event, no second
        POST."""
        standin.hold_syncs["s1"] = 0.8
        worker = WorkerProcess(
            fw.settings,
            tmp_path,
            args=("--concurrency", "2"),
            airflow_timeout_seconds=1,
            forward_lease_seconds=5,  # a lease of 12 s: 12 of Airflow's timeouts
            forward_unknown_outcome_seconds=0,
        )
        try:
            pids = pool_up(worker, client, 2)
            post_event(http, sync_id="s1")
            busy = poll_until(
                lambda: busy_members(client) if standin.uncommitted == 1 else None,
                "a member posting s1",
                30,
                0.02,
                worker.log,
            )
            os.kill(busy[0], signal.SIGKILL)
            poll_until(
                lambda: len([p for p in worker.members() if p not in pids]) == 1,
                "a member started in the killed one's place",
                30,
                details=worker.log,
            )
            poll_until(lambda: delivered(fw, "s1"), "s1 taken over", 60, details=worker.log)
        finally:
            worker.stop()
        d = delivery(fw, "s1")
        assert d is not None and d.get("recovered") == "1", d
        assert len(standin.posts) == 1 and len(standin.events) == 1
