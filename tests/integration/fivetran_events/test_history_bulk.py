"""The bulk loader leaves exactly what HistoryWriter.record leaves."""

from __future__ import annotations

import itertools
from typing import Any

import redis

from bench._history import load as load_many
from fivetran_events import HistoryWriter
from fivetran_events.model import Event
from fivetran_events.timeutil import to_ms
from testkit.support import at, ev

DAY_MS = 86_400_000


def contents(client: redis.Redis, prefix: str) -> dict[bytes, Any]:
    """Every key under ``prefix`` (name without it) with its DUMP, encoding included."""
    return {k[len(prefix) :]: client.dump(k) for k in client.scan_iter(f"{prefix}*")}


def events() -> list[Event]:
    """Out of order, retried, duplicated, failed, rescheduled, resynced, two connectors."""
    out = [
        ev(sync_id="late", created=at(2, 2)),
        ev("sync_start", sync_id="late", created=at(2, 1)),  # sync_start after sync_end
        ev("sync_start", sync_id="retry", created=at(3, 1)),
        ev(sync_id="retry", created=at(3, 2), status="FAILED", reason="disk full"),
        ev("sync_start", sync_id="retry", created=at(3, 3)),
        ev(sync_id="retry", created=at(3, 4)),
        ev(sync_id="retry", created=at(3, 4)),  # a redelivery
        ev(sync_id="r", created=at(4), status="RESCHEDULED"),
        ev("resync_connector", created=at(4, 1)),
        ev("sync_start", sync_id="running", created=at(5)),
        ev("sync_start", connector_id="other_one", sync_id="x", created=at(5)),
        ev("test_event", connector_id="_connector_1"),
    ]
    out += [
        ev(
            connector_id="other_one",
            sync_id=f"b4703f73-6315-4e22-8d7a-3bfb18b2fe{i:02d}",
            created=at(6, i % 24, i),
        )
        for i in range(40)  # past 16: some trim
    ]
    return out


def test_bulk_load_equals_record(client: redis.Redis) -> None:
    """Same events, same clock: byte-identical keys, trimming included."""
    now = to_ms(at(7))
    writer = HistoryWriter(client, "a:", retention_ms=30 * DAY_MS, trim_every=2)
    for e in events():
        writer.record(e, now=now)
    load_many(client, "b:", events(), retention_ms=30 * DAY_MS, now=now, trim_every=2)
    a, b = contents(client, "a:"), contents(client, "b:")
    a.pop(b"last_test_event")  # record's setup check, not history: bulk skips test events
    assert len(a) > 10 and a == b


def test_bulk_load_is_idempotent(client: redis.Redis) -> None:
    """Loading the same events twice changes nothing but the dedup marks, already there."""
    now = to_ms(at(7))
    load_many(client, "b:", events(), retention_ms=30 * DAY_MS, now=now)
    once = contents(client, "b:")
    assert load_many(client, "b:", itertools.chain(events()), 30 * DAY_MS, now=now) > 0
    assert contents(client, "b:") == once
