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
from fivetran_events.keys import ConnectorKeys, deliveries_key, due_key, queue_name, sweep_wake_key
from testkit.processes import stop_group
from testkit.servers import webhook_server
from testkit.support import job_sync_id, payload, recorded_ends, signed
from webhook_app.worker.build import build_forwarder

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
    """SIGKILL mid-load: every 200 is recorded with its delivery, due now (the webhook
    queues no job: a sweeper does); nothing is half-written; redelivering everything
    afterwards records each delivery exactly once, and one sweep queues one job each."""
    sent = [bodies(MAX_PER_THREAD) for _ in range(THREADS)]
    acked: list[bytes] = []
    lock = threading.Lock()
    stop = threading.Event()

    # webhook_server turns forwarding on: each success also creates its delivery.
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
    q = Queue(queue_name("test:"), connection=client)
    assert q.count == 0  # no worker ran: nothing queued them yet
    recorded_total = 0
    for c in range(5):
        keys = ConnectorKeys("test:", f"c{c}")
        ok = client.zrange(keys.ok, 0, -1)
        recorded_total += len(ok)
        # No half-written delivery: each completion has its dedup mark and its delivery.
        assert client.zcard(keys.seen) == len(ok) == recorded_ends(client, keys)
    assert recorded_total == client.zcard(deliveries_key("test:"))
    # Every delivery is due now, and the sweepers' wake list holds one element.
    now = int(time.time() * 1000)
    listed = cast("list[bytes]", client.zrange(deliveries_key("test:"), 0, -1))
    assert client.zcount(due_key("test:"), "-inf", now) == len(listed) == recorded_total
    assert client.lrange(sweep_wake_key("test:"), 0, -1) == [b"1"]
    for raw in acked:
        ev = parse_event(raw)
        keys = ConnectorKeys("test:", ev.connector_id)
        assert client.zscore(keys.seen, ev.dedup_id) is not None
    acked_ids = {json.loads(r)["sync_id"] for r in acked}
    assert acked_ids <= {d.decode().split(":")[1] for d in listed}

    # Fivetran redelivers whatever was not acknowledged (and we resend everything).
    with webhook_server(redis_url, tmp_path) as (base, _):
        s = requests.Session()
        everything = [raw for mine in sent for raw in mine[:200]]
        for raw in everything:
            _, headers = signed(raw)
            r = s.post(base + "/webhooks/fivetran", data=raw, headers=headers, timeout=5)
            assert r.status_code == 200 and r.json()["status"] in ("recorded", "duplicate")
    # A sweep queues every delivery, each once (a second queues none).
    fw = build_forwarder(settings, with_airflow=False)
    total = client.zcard(deliveries_key("test:"))
    assert fw.sweep(limit=100_000) == total and fw.sweep(limit=100_000) == 0
    final_jobs = fw.queue.job_ids
    assert len(final_jobs) == len(set(final_jobs))
    expected = {json.loads(r)["sync_id"] for r in everything} | acked_ids
    assert {job_sync_id(client, j) for j in fw.queue.get_jobs()} == expected
