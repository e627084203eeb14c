"""Load many events at once, with exactly the Redis contents ``HistoryWriter.record`` leaves.

For benchmarks and tests: each event goes through the record script itself
(redis-py's ``Script``, pipelined), so the layout has one implementation. What it skips is what
only a live delivery needs: the change notification and a caller's chunk.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis

from fivetran_events.history._lua import RECORD_NUMKEYS, record_script
from fivetran_events.history.writer import TRIM_EVERY, history_keys, script_args
from fivetran_events.model import Event, EventKind
from fivetran_events.timeutil import now_ms

#: Events per pipelined round trip.
BATCH = 2000


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
    script = client.register_script(record_script())
    cutoff = (now_ms() if now is None else now) - retention_ms
    pipe = client.pipeline(transaction=False)
    written = 0
    for event in events:
        if event.kind in (EventKind.OTHER, EventKind.TEST) or event.created_ms < cutoff:
            continue
        args = script_args(history_keys(prefix, event.connector_id)[0], event, cutoff, trim_every)
        # No notification: an empty channel.
        script(keys=args[:RECORD_NUMKEYS], args=[*args[RECORD_NUMKEYS:], "", ""], client=pipe)
        written += 1
        if written % BATCH == 0:
            pipe.execute()
    pipe.execute()
    return written
