"""Nothing queued in Redis runs as code: a worker runs only our own jobs, read as JSON.

A real worker process on the suite's Redis forwards to the Airflow 2 stand-in. Jobs are
planted on its queue as anyone who can write to Redis could plant them, with RQ's own
API: pickled (RQ's default) or JSON, naming ``os.system`` or one of our jobs with a
callback. Each would create a file if it ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Callback, Queue
from rq.job import Job
from rq.serializers import JSONSerializer

from fivetran_events.deliveries import DeliveryState
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import post_event
from testkit.processes import poll_until
from testkit.worker_process import WorkerProcess
from webhook_app.forwarding.forwarder import Forwarder
from webhook_app.forwarding.sweeper import FORWARD_JOB
from webhook_app.worker.queue import SERIALIZER, forward_queue

pytestmark = pytest.mark.timeout(90)


def plant(fw: Forwarder, client: redis.Redis, tmp: Path) -> dict[str, Path]:
    """Plant three jobs on the worker's queue; return each one's id and the file it would
    create if it ran (ours with a callback creates none: had it run, it would have
    finished, not failed)."""
    name = fw.queue.name
    files = {k: tmp / f"ran-{k}" for k in ("pickled", "json", "callback")}
    pickled = Queue(name, connection=client).enqueue("os.system", f"touch {files['pickled']}")
    as_json = Queue(name, connection=client, serializer=JSONSerializer).enqueue(
        "os.system", f"touch {files['json']}"
    )
    callback = forward_queue(fw.settings, client).enqueue(
        FORWARD_JOB,
        delivery="c1:s1:nothing",
        on_success=Callback("os.system"),
    )
    return {pickled.id: files["pickled"], as_json.id: files["json"], callback.id: files["callback"]}


def test_planted_jobs_are_refused_and_the_worker_goes_on(
    http: Any, fw: Forwarder, client: redis.Redis, standin: Airflow2StandIn, tmp_path: Path
) -> None:
    """Pickled, JSON naming os.system, or ours with a callback: each is refused unrun,
    logged and marked failed; a real delivery queued after them still reaches Airflow."""
    planted = plant(fw, client, tmp_path)
    with WorkerProcess(fw.settings, tmp_path, args=("--concurrency", "1")) as worker:
        post_event(http, sync_id="real")

        def settled() -> bool:
            states = [
                Job.fetch(j, connection=client, serializer=SERIALIZER).get_status() for j in planted
            ]
            delivered = [d.state for d in fw.store.recent(10)] == [DeliveryState.DELIVERED]
            return delivered and all(s == "failed" for s in states)

        poll_until(
            settled, "the planted jobs refused, the real one delivered", 60, details=worker.log
        )
        log = worker.log()
        assert worker.proc.poll() is None, log
    assert [p["extra"]["sync_id"] for p in standin.posts] == ["real"]
    assert not any(f.exists() for f in planted.values())
    for job_id in planted:
        assert f"refused job {job_id}" in log, log
    assert "not JSON" in log and "'os.system'" in log and "a callback" in log
    registry = fw.queue.failed_job_registry
    assert sorted(registry.get_job_ids()) == sorted(planted)
