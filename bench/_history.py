"""Histories written in bulk for benchmarks and the tests that measure them."""

from __future__ import annotations

from collections.abc import Iterable

import redis

from fivetran_events.history.writer import TRIM_EVERY, WriteStatus, record_many
from fivetran_events.model import Event


def load(
    client: redis.Redis,
    prefix: str,
    events: Iterable[Event],
    retention_ms: int,
    now: int | None = None,
    trim_every: int = TRIM_EVERY,
) -> int:
    """Write ``events`` as ``HistoryWriter.record`` would at ``now``; return how many were
    written (duplicates count, ignored events do not)."""
    results = record_many(client, prefix, events, retention_ms, now, trim_every)
    return sum(1 for _, status in results if status is not WriteStatus.IGNORED)
