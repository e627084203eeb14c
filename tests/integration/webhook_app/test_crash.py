"""Kill the server while it ingests under load: what was acknowledged is all there."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import cast

import pytest
import redis
import requests
from rq import Queue

from fivetran_events import Settings, parse_event
from fivetran_events.keys import ConnectorKeys, deliveries_key, due_key
from testkit.processes import stop_group
from testkit.servers import webhook_server
from testkit.support import job_sync_id, payload, recorded_ends, signed
from webhook_app.jobs import build_forwarder

pytestmark = pytest.mark.slow

THREADS = 6
MAX_PER_THREAD = 400
LOAD_SECONDS = 8.0


def bodies(n: int) -> list[bytes]:
    """Signed-payload bodies of n distinct successful syncs over five connectors."""
    return [
        signed(payload(sync_id=str(uuid.uuid4()), connector_id=f"c{i % 5}"))[0] for i in range(n)
    ]


def test_sigkill_under_load_keeps_every_ack(
    redis_url: str, client: redis.Redis, settings: Settings, tmp_path: Path
) -> None:
    """SIGKILL mid-load: every 200 is recorded with its job; nothing is half-written (a
    delivery the kill left without its job is due, and the sweeper queues it);
    redelivering everything afterwards records each delivery exactly once."""
    sent = [bodies(MAX_PER_THREAD) for _ in range(THREADS)]
    acked: list[bytes] = []
    lock = threading.Lock()
    stop = threading.Event()

    # webhook_server turns forwarding on: each success also queues its job.
    with webhook_server(redis_url, tmp_path) as (
        base,
        proc,
    ):

        def drive(mine: list[bytes]) -> None:
            s = requests.Session()
            deadline = time.monotonic() + LOAD_SECONDS
            for raw in mine:
                if stop.is_set() or time.monotonic() > deadline:
                    return
                _, headers = signed(raw)
                try:
                    r = s.post(base + "/webhooks/fivetran", data=raw, headers=headers, timeout=5)
                except requests.RequestException:
                    continue
                if r.status_code == 200 and r.json()["status"] == "recorded":
                    with lock:
                        acked.append(raw)

        threads = [threading.Thread(target=drive, args=(m,)) for m in sent]
        for t in threads:
            t.start()
        while len(acked) < 150 and any(t.is_alive() for t in threads):
            time.sleep(0.02)
        stop_group(proc, sig=signal.SIGKILL)  # master and workers, mid-request
        stop.set()
        for t in threads:
            t.join(timeout=30)

    assert len(acked) >= 150
    q = Queue("fivetran-events", connection=client)
    queued = set(q.job_ids)
    recorded_total = 0
    for c in range(5):
        keys = ConnectorKeys("test:", f"c{c}")
        ok = client.zrange(keys.ok, 0, -1)
        recorded_total += len(ok)
        # No half-written delivery: each completion has its dedup mark and its delivery.
        assert client.zcard(keys.seen) == len(ok) == recorded_ends(client, keys)
    assert recorded_total == client.zcard(deliveries_key("test:"))
    # The kill may fall between the script and the enqueue: those deliveries are due.
    listed = cast("list[bytes]", client.zrange(deliveries_key("test:"), 0, -1))
    jobless = {d.decode() for d in listed} - {j.kwargs["delivery"] for j in q.get_jobs()}
    assert len(queued) + len(jobless) == recorded_total
    assert all(client.zscore(due_key("test:"), did) is not None for did in jobless)
    for raw in acked:
        ev = parse_event(raw)
        keys = ConnectorKeys("test:", ev.connector_id)
        assert client.zscore(keys.seen, ev.dedup_id) is not None
    acked_ids = {json.loads(r)["sync_id"] for r in acked}
    job_syncs = {job_sync_id(client, j) for j in q.get_jobs()}
    assert acked_ids <= job_syncs

    # Fivetran redelivers whatever was not acknowledged (and we resend everything).
    with webhook_server(redis_url, tmp_path) as (base, _):
        s = requests.Session()
        everything = [raw for mine in sent for raw in mine[:200]]
        for raw in everything:
            _, headers = signed(raw)
            r = s.post(base + "/webhooks/fivetran", data=raw, headers=headers, timeout=5)
            assert r.status_code == 200 and r.json()["status"] in ("recorded", "duplicate")
    # The sweeper queues what the kill left without a job (due at its lease's end).
    fw = build_forwarder(settings, with_airflow=False)
    assert fw.sweep(now=int(time.time() * 1000) + fw.lease_ms + 1_000) == len(jobless)
    final_jobs = Queue("fivetran-events", connection=client).job_ids
    assert len(final_jobs) == len(set(final_jobs))
    expected = {json.loads(r)["sync_id"] for r in everything} | acked_ids
    assert {
        job_sync_id(client, j) for j in Queue("fivetran-events", connection=client).get_jobs()
    } == expected
