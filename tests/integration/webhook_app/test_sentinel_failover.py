"""Behind Redis Sentinel: SIGKILL the primary under load, lose no acknowledged delivery.

Real processes on loopback: a primary and a replica (AOF, fsync every second), three
sentinels (``redis-server --sentinel``), the webhook under gunicorn and a forwarding
worker both configured with a ``redis+sentinel://`` URL, the webhook waiting for one
replica (``FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS=1``) before it acknowledges. Signed
``sync_end`` deliveries arrive at a steady rate; a 503 is delivered again, as Fivetran
does. The primary is SIGKILLed; once the sentinels have promoted the replica it is
started again, as a service manager would, and the sentinels make it the new replica.

A kill that lands in the middle of a forwarding attempt leaves that delivery's lock and
in-flight mark on the new primary: by design it is tried again only after the lease and
the unknown-outcome margin (minutes by default). The worker here runs with a short lease
and margin (the stand-in commits an event before it answers), so even that delivery is
forwarded within the test's wait.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import redis
import requests
from pydantic import SecretStr

from fivetran_events import Settings, parse_event
from fivetran_events.keys import ConnectorKeys
from fivetran_events.redis_url import client_from_url
from testkit.airflow2_standin import running_airflow2_standin
from testkit.processes import poll_until
from testkit.sentinel import SentinelSetup, sentinel_setup
from testkit.servers import webhook_server
from testkit.support import payload, signed
from testkit.worker_process import WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SENDERS = 2
#: Pause between two deliveries of one sender: about 2 x 10 deliveries a second.
PACE_S = 0.1
CONNECTORS = 3
#: Acknowledged deliveries before the kill; load goes on this long after recovery.
ACKS_BEFORE = 40
AFTER_RECOVERY_S = 3.0
#: Bound on kill -> first acknowledgement again (detection 1 s, election, promotion).
RECOVERY_BOUND_S = 30.0


def test_primary_killed_under_load_loses_no_ack(tmp_path: Path) -> None:
    acked: dict[str, bytes] = {}  # sync id -> body, in the order acknowledged
    answers: Counter[str] = Counter()
    lock = threading.Lock()
    stop = threading.Event()
    killed_at: list[float] = []
    recovered_at: list[float] = []

    with (
        sentinel_setup(tmp_path / "redis") as redis_nodes,
        running_airflow2_standin() as airflow,
    ):
        url = redis_nodes.url()
        for i in range(CONNECTORS):
            airflow.add_dataset(f"fivetran://connector/c{i}")
        settings = Settings(
            redis_url=url,
            key_prefix="test:",
            airflow_url=airflow.url,
            airflow_username=airflow.username,
            airflow_password=SecretStr(airflow.password),
        )
        worker = WorkerProcess(
            settings,
            tmp_path,
            airflow_api_version="2",
            # The lease is max(forward_lease_seconds, 12 x airflow_timeout_seconds): 12 s.
            airflow_timeout_seconds=1,
            forward_lease_seconds=5,
            forward_unknown_outcome_seconds=1,
        )
        with (
            worker,
            webhook_server(
                url,
                tmp_path,
                FIVETRAN_EVENTS_AIRFLOW_URL=airflow.url,
                FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS="1",
                FIVETRAN_EVENTS_REDIS_WAIT_TIMEOUT_MS="500",
                FIVETRAN_EVENTS_RETRY_AFTER_SECONDS="1",
            ) as (base, _),
        ):

            def send() -> None:
                session = requests.Session()
                body: bytes | None = None
                while not stop.is_set():
                    if body is None:  # a 503'd delivery is sent again, as Fivetran does
                        body, headers = signed(
                            payload(
                                sync_id=str(uuid.uuid4()),
                                connector_id=f"c{len(acked) % CONNECTORS}",
                            )
                        )
                    try:
                        r = session.post(
                            base + "/webhooks/fivetran", data=body, headers=headers, timeout=40
                        )
                    except requests.RequestException as exc:
                        with lock:
                            answers[f"no answer: {type(exc).__name__}"] += 1
                        continue
                    with lock:
                        if r.status_code == 200 and r.json()["status"] in ("recorded", "duplicate"):
                            acked[parse_event(body).sync_id or ""] = body
                            answers[f"200 {r.json()['status']}"] += 1
                            if killed_at and not recovered_at:
                                recovered_at.append(time.monotonic())
                            body = None
                        elif r.status_code == 503 and r.headers.get("Retry-After"):
                            answers["503 with Retry-After"] += 1
                        else:
                            answers[f"{r.status_code} {r.text[:80]}"] += 1
                    stop.wait(PACE_S)

            senders = [threading.Thread(target=send) for _ in range(SENDERS)]
            for t in senders:
                t.start()
            try:
                poll_until(lambda: len(acked) >= ACKS_BEFORE, "acks before the kill", 60)
                old_primary = redis_nodes.primary
                acked_before = len(acked)
                killed_at.append(time.monotonic())
                old_primary.stop(signal.SIGKILL)  # its PID only
                poll_until(
                    lambda: _promoted(redis_nodes, old_primary.port),
                    "the sentinels to promote the replica",
                    RECOVERY_BOUND_S,
                )
                promoted_at = time.monotonic()
                old_primary.start()  # restarted as a service manager would; it rejoins
                poll_until(
                    lambda: recovered_at,
                    "the webhook to acknowledge again",
                    RECOVERY_BOUND_S,
                    details=lambda: str(answers),
                )
                time.sleep(AFTER_RECOVERY_S)  # steady load after recovery, by design
            finally:
                stop.set()
                for t in senders:
                    t.join(timeout=60)

            client = client_from_url(url, socket_timeout=5)  # the new primary, via Sentinel
            lost = [
                sid
                for sid, body in acked.items()
                if client.zscore(
                    ConnectorKeys("test:", parse_event(body).connector_id).seen,
                    parse_event(body).dedup_id,
                )
                is None
            ]

            def forwarded() -> Counter[str]:
                return Counter(e["extra"].get("sync_id") for e in list(airflow.events))

            poll_until(
                lambda: set(acked) <= set(forwarded()),
                "every acknowledged sync to be forwarded",
                60,
                details=lambda: worker.log(),
                progress=lambda: len(airflow.events),  # a CPU hog slows the catch-up
            )
            time.sleep(1.0)  # a second forward of anything would land by now
            counts = forwarded()
            worker_alive = worker.proc.poll() is None  # it rode out the failover by itself
            worker.stop()

    recover_s = recovered_at[0] - killed_at[0]
    unavailable = answers["503 with Retry-After"]
    print(
        f"\nsentinel failover under load: load {sum(answers.values())} deliveries at "
        f"~{SENDERS / PACE_S:.0f}/s, acknowledged {len(acked)} ({acked_before} before the "
        f"kill), 503s {unavailable}, lost={len(lost)}, seconds to recover "
        f"{recover_s:.1f} (promotion after {promoted_at - killed_at[0]:.1f}); "
        f"answers {dict(answers)}"
    )
    assert lost == []
    assert worker_alive, worker.log()
    assert set(answers) <= {"200 recorded", "200 duplicate", "503 with Retry-After"}, answers
    assert unavailable > 0, f"the failover was not seen: {answers}"
    assert recover_s < RECOVERY_BOUND_S
    twice = {sid: n for sid, n in counts.items() if n != 1}
    assert twice == {}, f"forwarded more than once: {twice}"


def _promoted(nodes: SentinelSetup, old_port: int) -> bool:
    try:
        return nodes.primary_port() != old_port
    except redis.RedisError:
        return False
