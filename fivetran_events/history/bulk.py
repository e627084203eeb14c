"""Load many events at once, with exactly the Redis contents ``HistoryWriter.record`` leaves.

For benchmarks, tests and imports: each event goes through the record script itself
(redis-py's ``Script``, pipelined), so the layout has one implementation. What it skips is what
only a live delivery needs: the change notification and a caller's chunk.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import redis
from redis.typing import EncodableT

from ..model import Event, EventKind
from ..timeutil import now_ms
from ._lua import RECORD_NUMKEYS, record_script
from .writer import TRIM_EVERY, OnSuccess, WriteStatus, history_keys, script_args

#: Events per pipelined round trip.
BATCH = 2000
#: A chunk of the record script that answers 2 when the history already held the event
#: (``known`` in _lua.WRITE: the same start or end recorded before, its dedup mark gone),
#: before any chunk of the caller's runs: an import counts it as already known and
#: forwards nothing for it.
KNOWN_CHUNK = "if known then return 2 end\n"
_STATUS = {0: WriteStatus.DUPLICATE, 1: WriteStatus.RECORDED, 2: WriteStatus.DUPLICATE}


def load(
    client: redis.Redis,
    prefix: str,
    events: Iterable[Event],
    retention_ms: int,
    now: int | None = None,
    trim_every: int = TRIM_EVERY,
) -> int:
    """Write ``events`` in order as ``record`` would at ``now``; return how many were written.

    Events ``record`` would ignore (test events, unknown kinds, older than the retention)
    are skipped the same way; the caller checks clock skew if it cares.
    """
    results = record_many(client, prefix, events, retention_ms, now, trim_every)
    return sum(1 for _, status in results if status is not WriteStatus.IGNORED)


def record_many(
    client: redis.Redis,
    prefix: str,
    events: Iterable[Event],
    retention_ms: int,
    now: int | None = None,
    trim_every: int = TRIM_EVERY,
    on_success: OnSuccess | None = None,
    batch: int = BATCH,
) -> Iterator[tuple[Event, WriteStatus]]:
    """Write ``events`` in order, ``batch`` to a round trip; yield each with what became of it.

    RECORDED: the history took it. DUPLICATE: it held it already (its dedup mark, the
    same start or end, or another source's copy of it: _lua.SAME_SYNC_WINDOW_MS).
    IGNORED: ``record`` would ignore it (not a sync or lifecycle event, older than the
    retention). ``on_success`` is the webhook's hook (its chunk creates a success's
    deliveries, due now, and wakes the sweepers): only what is recorded is forwarded.
    """
    chunk = KNOWN_CHUNK + (on_success.lua if on_success is not None else "")
    script = client.register_script(record_script(chunk))
    cutoff = (now_ms() if now is None else now) - retention_ms
    pipe = client.pipeline(transaction=False)
    pending: list[Event] = []

    def flush() -> Iterator[tuple[Event, WriteStatus]]:
        replies = pipe.execute()
        for event, reply in zip(pending, replies, strict=True):
            yield event, _STATUS[int(reply)]
        pending.clear()

    for event in events:
        if event.kind in (EventKind.OTHER, EventKind.TEST, EventKind.SAMPLE) or (
            event.created_ms < cutoff
        ):
            yield event, WriteStatus.IGNORED
            continue
        args = script_args(history_keys(prefix, event.connector_id)[0], event, cutoff, trim_every)
        extra_keys: Sequence[str] = ()
        extra_args: Sequence[EncodableT] = ()
        if on_success is not None and event.is_success:
            extra_keys, extra_args = on_success(event)
        # No notification: an empty channel.
        script(
            keys=[*args[:RECORD_NUMKEYS], *extra_keys],
            args=[*args[RECORD_NUMKEYS:], "", "", *extra_args],
            client=pipe,
        )
        pending.append(event)
        if len(pending) >= batch:
            yield from flush()
    if pending:
        yield from flush()
