"""Restart Redis (AOF on) under load: every acknowledged delivery survives; 503, never 500.

Real gunicorn in front of a redis-server of the test's own with ``appendonly yes`` and
``appendfsync everysec`` (as deploy/compose.yaml runs it). Redis is stopped with
SIGTERM, as a service manager restarts it, kept down long enough for the webhook's own
retries to run out, and started again from its AOF. Meanwhile /readyz says not ready
without naming Redis's address.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import requests
from rq import Queue

from fivetran_events import Settings, parse_event
from fivetran_events.keys import ConnectorKeys, queue_name
from testkit.own_redis import own_redis
from testkit.processes import poll_until
from testkit.servers import webhook_server
from testkit.support import payload, recorded_ends, signed
from webhook_app.worker.build import build_forwarder

pytestmark = pytest.mark.slow

THREADS = 4
CONNECTORS = 5
#: Longer than redis-py's default retries (three, jittered backoff) take to give up.
DOWN_SECONDS = 10.0
#: Deliveries acknowledged before the restart, and again after it, before the load stops.
ACKS_EACH_SIDE = 100


def test_redis_restart_under_load_loses_no_ack(tmp_path: Path) -> None:
    acked: list[bytes] = []
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    stop = threading.Event()

    with (
        own_redis(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "everysec") as server,
        webhook_server(server.url, tmp_path) as (base, _),
    ):

        def drive() -> None:
            session = requests.Session()
            while not stop.is_set():
                raw, headers = signed(
                    payload(sync_id=str(uuid.uuid4()), connector_id=f"c{len(acked) % CONNECTORS}")
                )
                try:
                    r = session.post(
                        base + "/webhooks/fivetran", data=raw, headers=headers, timeout=40
                    )
                except requests.RequestException as exc:
                    with lock:
                        outcomes[f"no answer: {type(exc).__name__}"] += 1
                    continue
                with lock:
                    if r.status_code == 200 and r.json()["status"] == "recorded":
                        acked.append(raw)
                        outcomes["200 recorded"] += 1
                    elif r.status_code == 503 and r.headers.get("Retry-After"):
                        outcomes["503 with Retry-After"] += 1
                    else:
                        outcomes[f"{r.status_code} {r.text[:60]}"] += 1

        def wait_acks(n: int, timeout: float = 60.0) -> None:
            poll_until(
                lambda: len(acked) >= n,
                f"{n} acknowledged deliveries",
                timeout,
                interval=0.02,
                details=lambda: f"only {len(acked)}: {outcomes}",
            )

        threads = [threading.Thread(target=drive) for _ in range(THREADS)]
        for t in threads:
            t.start()
        try:
            wait_acks(ACKS_EACH_SIDE)
            server.stop()  # SIGTERM: Redis writes out its AOF and exits
            acked_at_stop, down_since = len(acked), time.monotonic()
            ready = requests.get(base + "/readyz", timeout=30)
            time.sleep(max(0.0, DOWN_SECONDS - (time.monotonic() - down_since)))
            server.start()
            wait_acks(len(acked) + ACKS_EACH_SIDE)
            ready_after = requests.get(base + "/readyz", timeout=30).status_code
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        client = server.client()
        lost = [
            raw
            for raw in acked
            if client.zscore(
                ConnectorKeys("test:", parse_event(raw).connector_id).seen,
                parse_event(raw).dedup_id,
            )
            is None
        ]
        keys = [ConnectorKeys("test:", f"c{i}") for i in range(CONNECTORS)]
        recorded = sum(client.zcard(k.ok) for k in keys)
        half_written = [
            k.connector_id
            for k in keys
            if not client.zcard(k.seen) == client.zcard(k.ok) == recorded_ends(client, k)
        ]
        queued = Queue(queue_name("test:"), connection=client).count
        # The webhook queues no job: each delivery is due now, and a sweep queues it
        # (also one recorded just before Redis went, answered 503, redelivered as a
        # duplicate).
        fw = build_forwarder(
            Settings(redis_url=server.url, key_prefix="test:", airflow_url="http://127.0.0.1:9"),
            with_airflow=False,
        )
        swept = fw.sweep(limit=100_000)
        jobs = Queue(queue_name("test:"), connection=client).count

    summary = (
        f"redis restart under load: {sum(outcomes.values())} deliveries, "
        f"{len(acked)} acknowledged ({acked_at_stop} before the stop), {len(lost)} of "
        f"them lost; {recorded} recorded, {jobs} forwarding jobs ({swept} queued by the "
        f"sweeper, {queued} by the webhook); answers {dict(outcomes)}"
    )
    print("\n" + summary)
    assert lost == [], summary
    assert set(outcomes) <= {"200 recorded", "503 with Retry-After"}, summary
    assert outcomes["503 with Retry-After"] > 0, f"the restart was not seen: {summary}"
    assert half_written == [] and recorded == jobs >= len(acked), summary
    assert queued == 0 and jobs == swept, summary
    # Not ready while Redis is down (a balancer stops sending), without naming its address.
    assert ready.status_code == 503 and ready.headers.get("Retry-After"), ready.text
    assert str(server.port) not in ready.text and "127.0.0.1" not in ready.text, ready.text
    assert ready_after == 200
