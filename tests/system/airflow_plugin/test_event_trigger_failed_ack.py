"""A wake Airflow reports as failed is sent again, on the session's real triggerer.

Airflow's shared stream fails a wake when a trigger event derived from it is not
confirmed persisted within ``[triggerer] shared_stream_ack_timeout`` (or the watcher's
queue overflowed), and expects the producer to redeliver it. Here the triggerer is
restarted with testkit/lossy_triggerer on its ``PYTHONPATH``: its supervisor loses one
chosen sync's event (not persisted, never confirmed) and lives on. A second sync of the
same connector, persisted while the first wake waits for its ack timeout, must not carry
the lost one into the stored state: every sync still becomes exactly one asset event.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from testkit.airflow_harness import AirflowServer
from testkit.support import deliver as post
from testkit.support import pattern_listeners, payload

from .watchers import POLL, position_key, watch

pytestmark = pytest.mark.slow

#: Seconds before Airflow fails a wake whose event was not confirmed persisted. Longer
#: than a tick (POLL) plus a state sync, so the second sync's wake is resolved cleanly
#: by then and queued behind the failed one: the order in which the loss happened.
ACK_TIMEOUT = 20
CONNECTOR = "watch_ack"
LOSSY = Path(__file__).parents[3] / "testkit" / "lossy_triggerer"


@dataclass
class LossyTriggerer:
    """The session's triggerer, restarted to lose the events of the sync ids listed."""

    airflow3: AirflowServer

    @property
    def listed(self) -> Path:
        return self.airflow3.output_dir / "lose_events.txt"

    @property
    def lost_file(self) -> Path:
        return self.airflow3.output_dir / "lost_events.txt"

    def lose(self, sync_id: str) -> None:
        with self.listed.open("a") as f:
            f.write(f"{sync_id}\n")

    def lost(self) -> list[str]:
        return self.lost_file.read_text().split() if self.lost_file.exists() else []

    def log_lines(self, *needles: str) -> list[str]:
        log = self.airflow3.home / "triggerer.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        return [line for line in lines if any(n in line for n in needles)]


@pytest.fixture(scope="module")
def lossy_triggerer(airflow3: AirflowServer) -> Iterator[LossyTriggerer]:
    saved = dict(airflow3.extra_env)
    lossy = LossyTriggerer(airflow3)
    airflow3.extra_env.update(
        {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(LOSSY), os.environ.get("PYTHONPATH")])),
            "FTE_LOSE_EVENTS": str(lossy.listed),
            "FTE_LOST_EVENTS": str(lossy.lost_file),
            "AIRFLOW__TRIGGERER__SHARED_STREAM_ACK_TIMEOUT": str(ACK_TIMEOUT),
        }
    )
    airflow3.stop_triggerer()
    airflow3.start_triggerer()
    try:
        yield lossy
    finally:
        airflow3.extra_env.clear()
        airflow3.extra_env.update(saved)
        airflow3.stop_triggerer()
        airflow3.start_triggerer()


def sync_ids(airflow3: AirflowServer) -> list[str] | None:
    """The sync ids of the asset's trigger events, oldest first (None while unreadable).

    Airflow 3.3's event listing answers 500 while a run it created is still queued.
    """
    try:
        events = airflow3.asset_events(f"fivetran://connector/{CONNECTOR}")
    except requests.HTTPError:
        return None
    return [
        e["extra"]["payload"]["sync_id"]
        for e in events
        if (e.get("extra") or {}).get("from_trigger")
    ]


def wait_sync_ids(airflow3: AirflowServer, count: int, timeout: float) -> list[str]:
    def enough() -> list[str] | None:
        ids = sync_ids(airflow3)
        return ids if ids is not None and len(ids) >= count else None

    return airflow3.wait_for(f"{count} watcher events of {CONNECTOR}", enough, timeout, 1.0)


def stored_handled(airflow3: AirflowServer) -> set[str]:
    return {s for v in airflow3.asset_state(position_key(CONNECTOR)) for s, _ in v["handled"]}


def test_a_sync_whose_event_airflow_lost_is_sent_again_once(
    airflow3: AirflowServer,
    lossy_triggerer: LossyTriggerer,
    http: Any,
    redis_proc: Any,
) -> None:
    """The first sync's event is lost (Airflow fails its wake at the ack timeout); a second
    sync's event is persisted meanwhile. Both end up as exactly one asset event each, and
    the stored state holds both: the second sync's store did not mark the lost one."""
    watch(airflow3, "watchers_failed_ack.py", [(CONNECTOR, "fivetran_events_redis")])
    lost, kept = str(uuid.uuid4()), str(uuid.uuid4())
    lossy_triggerer.lose(lost)
    started = time.monotonic()
    post(http, payload(connector_id=CONNECTOR, sync_id=lost))
    airflow3.wait_for(
        "the triggerer to lose the first event", lambda: lost in lossy_triggerer.lost()
    )
    post(http, payload(connector_id=CONNECTOR, sync_id=kept))
    assert wait_sync_ids(airflow3, 1, 60) == [kept]
    airflow3.wait_for(
        "the lost event's wake to time out",
        lambda: lossy_triggerer.log_lines("Ack timeout"),
        ACK_TIMEOUT + 60,
    )
    # Redelivery: the failed watcher ends, Airflow starts it again, its first wake reads
    # the history; a tick later (at most POLL) the lost sync is an event, or never.
    try:
        ids = wait_sync_ids(airflow3, 2, 3 * POLL + 10)
    except TimeoutError:
        ids = sync_ids(airflow3) or []
    time.sleep(2 * POLL + 2)  # two more ticks: a duplicate would have come
    final = sync_ids(airflow3)
    print(
        f"events {final} {time.monotonic() - started:.1f}s after the first sync; triggerer log:\n"
        + "\n".join(
            lossy_triggerer.log_lines("Ack timeout", "not resolved", "sending them again")[-6:]
        )
    )
    assert lost in lossy_triggerer.lost()
    assert final == ids == [kept, lost], "each sync must become exactly one asset event"
    assert {lost, kept} <= stored_handled(airflow3)
    airflow3.add_dag("watchers_failed_ack.py", "")  # retire the watcher
    client = redis.Redis(host=redis_proc.host, port=redis_proc.port)
    airflow3.wait_for(
        "the retired watcher to unsubscribe", lambda: pattern_listeners(client) == 0, 180
    )
