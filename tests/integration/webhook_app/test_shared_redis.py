"""Two deployments on one Redis, told apart by their key prefixes, never cross: each
forwards only its own syncs, to its own Airflow, and no job of one is in the other's
queue or registries.

The suite's redis-server, two web apps, two real worker processes and two Airflow 2
stand-ins. Both deployments receive the same sync (one Fivetran account behind both),
so their deliveries have the same ids under different prefixes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis
from rq import Queue, Worker

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryState
from testkit.airflow2_standin import Airflow2StandIn, running_airflow2_standin
from testkit.forward_support import URI, forwarder, post_event
from testkit.processes import poll_until
from testkit.worker_process import WorkerProcess
from webhook_app import create_app
from webhook_app.forwarding.forwarder import Forwarder

pytestmark = pytest.mark.timeout(90)

DEPLOYMENTS = ("east", "west")


def job_ids(queue: Queue) -> set[str]:
    """Every job id the queue and its registries hold."""
    registries = (
        queue.finished_job_registry,
        queue.failed_job_registry,
        queue.started_job_registry,
        queue.scheduled_job_registry,
        queue.deferred_job_registry,
        queue.canceled_job_registry,
    )
    return set(queue.job_ids).union(*(r.get_job_ids() for r in registries))


def delivered(fw: Forwarder) -> list[str]:
    return sorted(
        str(d.get("sync_id")) for d in fw.store.recent(10) if d.state is DeliveryState.DELIVERED
    )


def delivered_all(fw: Forwarder, sync_ids: list[str]) -> bool:
    return delivered(fw) == sync_ids


@pytest.fixture
def airflows() -> Iterator[dict[str, Airflow2StandIn]]:
    """One Airflow stand-in per deployment, each knowing the connector's dataset."""
    with ExitStack() as stack:
        found = {name: stack.enter_context(running_airflow2_standin()) for name in DEPLOYMENTS}
        for af in found.values():
            af.add_dataset(URI)
        yield found


def test_each_deployment_forwards_its_own_syncs_to_its_own_airflow(
    settings: Settings,
    client: redis.Redis,
    airflows: dict[str, Airflow2StandIn],
    tmp_path: Path,
) -> None:
    fws: dict[str, Forwarder] = {}
    for name, af in airflows.items():
        own = settings.model_copy(update={"key_prefix": f"{name}:"})
        fws[name] = forwarder(own, af.url, af.username, af.password)
        with create_app(own).test_client() as http:
            for sync_id in ("shared", f"only-{name}"):
                post_event(http, sync_id=sync_id)
    with ExitStack() as stack:
        workers = {
            name: stack.enter_context(
                WorkerProcess(fw.settings, tmp_path, f"worker-{name}", args=("--concurrency", "1"))
            )
            for name, fw in fws.items()
        }
        for name, fw in fws.items():
            want = sorted(["shared", f"only-{name}"])
            poll_until(
                functools.partial(delivered_all, fw, want),
                f"{name}'s two deliveries",
                60,
                details=workers[name].log,
            )
        registered = {name: {w.pid for w in Worker.all(queue=fw.queue)} for name, fw in fws.items()}
        assert registered == {name: {w.pid} for name, w in workers.items()}
    for name, af in airflows.items():
        assert sorted(p["extra"]["sync_id"] for p in af.posts) == ["only-" + name, "shared"]
    east, west = (fws[name].queue for name in DEPLOYMENTS)
    assert (east.name, west.name) == ("east:forward", "west:forward")
    for name, mine, theirs in (("east", east, west), ("west", west, east)):
        ids = job_ids(mine)
        assert len(ids) == 2, ids  # its two attempts, finished
        assert all(i.startswith(f"{name}-") for i in ids), ids
        assert not ids & job_ids(theirs)
