"""Replay: forward deliveries again (atomically), and forward the past on request.

Both entry points serve ``fivetran-events replay``: ``replay(ids)`` gives deliveries that
were not delivered a new retry window, ``forward_since(ms)`` creates the deliveries of
successes recorded while forwarding was off (``replay --since``). Either makes them due
now and wakes the workers' sweepers, which queue their jobs: the webhook's path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from redis.exceptions import WatchError

from fivetran_events import Event, HistoryReader, as_text
from fivetran_events.deliveries import Delivery, DeliveryState
from fivetran_events.keys import (
    deliveries_key,
    due_key,
    sweep_wake_key,
    undelivered_key,
)
from fivetran_events.model import EventKind
from fivetran_events.timeutil import from_ms, iso

from .enqueue import Enqueuer, record_ttl_ms
from .store import DeliveryStore


def replay(enq: Enqueuer, ids: Iterable[str], clock: Callable[[], int]) -> list[str]:
    """Give given-up (or stuck) deliveries a new retry window, due now."""
    return [did for did in ids if _replay_one(enq, did, clock)]


def _replay_one(enq: Enqueuer, did: str, clock: Callable[[], int]) -> bool:
    """Reset ``did`` unless Airflow has its event, in one optimistic transaction.

    The delivery is WATCHed before it is read: a worker that records the event between
    this read and the write below aborts the write, and the read is made again.
    """
    key = enq.store.key(did)
    prefix = enq.settings.key_prefix
    with enq.store.client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(key)
                d = enq.store.get(did)
                if d is None or d.state is DeliveryState.DELIVERED or d.get("event_id"):
                    return False
                now = clock()
                pipe.multi()
                pipe.hset(
                    key,
                    mapping={
                        "state": DeliveryState.PENDING.value,
                        "window_ms": str(now),
                        "reason": f"replayed at {iso(now)}",
                        "updated_ms": str(now),
                    },
                )
                pipe.hdel(key, "next_attempt_ms")
                pipe.zrem(undelivered_key(prefix), did)
                # Due now; the sweeper claims it unless its last job is still queued.
                pipe.zadd(due_key(prefix), {did: now})
                # A new window: listed as new, and its record (and its sync's set) lives a
                # whole window again.
                pipe.zadd(deliveries_key(prefix), {did: now})
                fresh = Delivery(did, {**d.fields, "window_ms": str(now)})
                enq.store.expire(pipe, fresh, record_ttl_ms(enq.settings))
                enq.store.index_state(pipe, fresh, DeliveryState.PENDING)
                # Wake a sweeper; the list keeps one element however many replays.
                pipe.rpush(sweep_wake_key(prefix), 1)
                pipe.ltrim(sweep_wake_key(prefix), 0, 0)
                pipe.execute()
                return True
            except WatchError:
                continue


def forward_since(
    enq: Enqueuer, since_ms: int, clock: Callable[[], int]
) -> tuple[list[str], list[str], int]:
    """Forward every success that ended at or after ``since_ms``.

    Creates the deliveries that do not exist (successes recorded while forwarding was
    off) and replays existing ones that were not delivered, all due now. Returns
    (created, replayed, already delivered).
    """
    prefix = enq.settings.key_prefix
    now = clock()
    created: list[str] = []
    existing: list[str] = []
    reader = HistoryReader(enq.store.client, prefix, enq.settings.max_sync_duration_ms)
    for rec in reader.connector_records():
        for c in reader.successes_since(rec.connector_id, since_ms):
            event = Event(
                kind=EventKind.SYNC_END,
                event="sync_end",
                created=from_ms(c.ended_ms),
                connector_id=rec.connector_id,
                connector_name=rec.name,
                connector_type=rec.type,
                group_id=rec.group,
                sync_id=c.sync_id,
                status=c.status,
            )
            for target in enq.targets(event):
                did = enq.store.id_of(event, target[0])
                if enq.store.client.exists(enq.store.key(did)):
                    existing.append(did)
                    continue
                created.append(enq.create(event, target, now))
    replayed = replay(enq, existing, clock)
    return created, replayed, len(existing) - len(replayed)


def deliveries_of_sync(
    store: DeliveryStore, sync_id: str, connector_id: str | None = None
) -> list[str]:
    """Return the delivery ids of ``sync_id`` (of any connector unless one is named)."""
    ids = [as_text(m) for m in store.client.zrange(deliveries_key(store.prefix), 0, -1)]
    return [
        i
        for i in ids
        if i.split(":")[1] == sync_id and (connector_id is None or i.split(":")[0] == connector_id)
    ]
