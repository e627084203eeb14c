"""The reads behind one decision, shared by the sync and the async reader.

``facts_commands`` queues them on either kind of pipeline, ``facts_from_results`` turns
the replies into ``Facts``: one pipelined round trip of O(log n) reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..decision import Completion, Criterion, Facts, Lifecycle, RunningSync, parse_criterion
from ..keys import ConnectorKeys, connectors_key
from ..redis_url import as_text
from ..timeutil import now_ms, to_ms, to_utc
from .codec import decode_completion

#: Successes fetched by end time for one decision (the first counts under ended_after;
#: the others let started_after pick the earliest-ended of overlapping syncs).
SUCCESS_PAGE = 8


def facts_commands(
    pipe: Any,
    keys: ConnectorKeys,
    target_ms: int,
    running_from_ms: int,
    started_after: bool = False,
) -> None:
    """Queue the reads that make up Facts on a sync or async pipeline (7 or 8 commands).

    A running sync counts from ``running_from_ms`` on, inclusive: one that started
    exactly the maximum sync duration ago is still running.
    """
    pipe.zrangebyscore(keys.ok, target_ms, "+inf", start=0, num=SUCCESS_PAGE, withscores=True)
    pipe.zrangebyscore(keys.fail, target_ms, "+inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(keys.ok, f"({target_ms}", "-inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(keys.fail, f"({target_ms}", "-inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(keys.running, "+inf", running_from_ms, start=0, num=1, withscores=True)
    # The newest end that completes nothing (a RESCHEDULED one makes the answer WAIT
    # until Fivetran runs it again) and the connector's lifecycle (paused, deleted).
    pipe.zrevrange(keys.other, 0, 0, withscores=True)
    pipe.hget(connectors_key(keys.prefix), keys.connector_id)
    if started_after:
        # The first success that started at or after the target, from the start-scored
        # index: one O(log n) read however many successes started before the target.
        pipe.zrangebyscore(keys.okstart, target_ms, "+inf", start=0, num=1, withscores=True)


def _one(rows: Sequence[tuple[Any, float]]) -> Completion | None:
    return decode_completion(*rows[0]) if rows else None


def running_sync(rows: Sequence[tuple[Any, float]]) -> RunningSync | None:
    """Return the running sync of a ``running`` set's (member, score) rows, if any."""
    return RunningSync(as_text(rows[0][0]), int(rows[0][1])) if rows else None


def facts_from_results(results: Sequence[Any], target_ms: int) -> Facts:
    """Build Facts from the replies of facts_commands."""
    ok_rows, fail_rows, ok_before, fail_before, running_rows, other, meta = results[:7]
    by_start = results[7] if len(results) > 7 else []
    successes: dict[tuple[str, int], Completion] = {}
    rows = [(m, s, False) for m, s in ok_rows] + [(m, s, True) for m, s in by_start]
    for member, score, scored_by_start in rows:
        c = decode_completion(member, score, by_start=scored_by_start)
        successes.setdefault((c.sync_id, c.ended_ms), c)
    latest = max(
        (c for c in (_one(ok_before), _one(fail_before)) if c is not None),
        key=Completion.order_key,
        default=None,
    )
    running = running_sync(running_rows)
    return Facts(
        target_ms=target_ms,
        successes_from_target=tuple(sorted(successes.values(), key=Completion.order_key)),
        first_failure_from_target=_one(fail_rows),
        latest_before_target=latest,
        running=running,
        latest_other=_one(other),
        lifecycle=lifecycle_of(meta),
    )


def lifecycle_of(meta: str | bytes | None) -> Lifecycle | None:
    """Read the lifecycle of a connector's entry in the connectors hash (None: unknown)."""
    if meta is None:
        return None
    return Lifecycle.from_meta(json.loads(meta))


def running_from(now: int | None, max_sync_duration_ms: int) -> int:
    """The earliest start of a sync still running at ``now`` (the wall clock if None).

    Inclusive: a sync that started exactly the maximum duration ago is still running;
    only one that has run longer is taken as lost.
    """
    return (now_ms() if now is None else now) - max_sync_duration_ms


def target_and_criterion(
    target: datetime | int, criterion: Criterion | str
) -> tuple[int, Criterion]:
    """Return the target in epoch ms and the parsed criterion of one decision.

    Both readers' ``decide`` start here, so no caller derives ``started_after`` itself.
    """
    target_ms = target if isinstance(target, int) else to_ms(to_utc(target))
    return target_ms, parse_criterion(criterion)
