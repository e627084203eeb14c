"""Reading the history: the one decision, and the listings shaped for people.

``HistoryReader.decide`` is the entry point every caller uses (the read API, the CLI,
the sensor, the short-circuit operator). The trigger runs in the triggerer's event loop,
where a blocking Redis call would stall every other deferred task, so it decides through
``AsyncHistoryReader``: the same reads (``facts_commands``) decoded the same way
(``facts_from_results``), one pipelined round trip of O(log n) reads whatever the
criterion, so a decision never holds the loop for longer than one short await.

The listings (``syncs``, ``connectors``) are not part of the decision: they walk a page
of a connector's completions or every known connector, and return JSON-ready dicts for
the read API and the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..decision import (
    Completion,
    Criterion,
    Decision,
    Facts,
    Flags,
    Lifecycle,
    RunningSync,
    decide,
    parse_criterion,
)
from ..keys import ConnectorKeys, connectors_key
from ..redis_url import as_text
from ..timeutil import now_ms, to_ms, to_utc
from .codec import decode_completion

if TYPE_CHECKING:  # typing.Unpack is 3.11's; pydantic brings typing_extensions
    from typing_extensions import Unpack

#: Successes fetched by end time for one decision (the first counts under ended_after;
#: the others let started_after pick the earliest-ended of overlapping syncs).
SUCCESS_PAGE = 8

#: A connector's newest success, failure and running sync (each None when there is none).
Newest = tuple[Completion | None, Completion | None, RunningSync | None]


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


def _running(rows: Sequence[tuple[Any, float]]) -> RunningSync | None:
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
    return Facts(
        target_ms=target_ms,
        successes_from_target=tuple(sorted(successes.values(), key=Completion.order_key)),
        first_failure_from_target=_one(fail_rows),
        latest_before_target=latest,
        running=_running(running_rows),
        latest_other=_one(other),
        lifecycle=None if meta is None else Lifecycle.from_meta(json.loads(meta)),
    )


def newest_commands(pipe: Any, keys: ConnectorKeys, running_from_ms: int) -> None:
    """Queue the reads of a connector's ``Newest`` (3 commands, O(log n) each)."""
    pipe.zrevrange(keys.ok, 0, 0, withscores=True)
    pipe.zrevrange(keys.fail, 0, 0, withscores=True)
    pipe.zrevrangebyscore(keys.running, "+inf", running_from_ms, start=0, num=1, withscores=True)


def newest_from_results(results: Sequence[Any]) -> list[Newest]:
    """Decode the replies of ``newest_commands``, queued for one connector after another."""
    return [
        (_one(ok), _one(fail), _running(run))
        for ok, fail, run in zip(results[0::3], results[1::3], results[2::3], strict=True)
    ]


def target_and_criterion(
    target: datetime | int, criterion: Criterion | str
) -> tuple[int, Criterion]:
    """Return the target in epoch ms and the parsed criterion of one decision."""
    target_ms = target if isinstance(target, int) else to_ms(to_utc(target))
    return target_ms, parse_criterion(criterion)


class _Reader:
    """What both readers hold: a client, the key prefix and the maximum sync duration."""

    def __init__(self, client: Any, prefix: str, max_sync_duration_ms: int) -> None:
        self.client = client  # a redis.Redis, or a redis.asyncio.Redis for the async reader
        self.prefix = prefix
        self.max_sync_duration_ms = max_sync_duration_ms

    def keys(self, connector_id: str) -> ConnectorKeys:
        return ConnectorKeys(self.prefix, connector_id)

    def running_from(self, now: int | None) -> int:
        """The earliest start of a sync still running at ``now`` (the wall clock if None).

        Inclusive: a sync that started exactly the maximum duration ago is still running;
        only one that has run longer is taken as lost.
        """
        return (now_ms() if now is None else now) - self.max_sync_duration_ms

    def _facts_pipeline(
        self, connector_id: str, target_ms: int, now: int | None, started_after: bool
    ) -> Any:
        pipe = self.client.pipeline(transaction=False)
        facts_commands(
            pipe, self.keys(connector_id), target_ms, self.running_from(now), started_after
        )
        return pipe


class HistoryReader(_Reader):
    """Answer the sensor's questions in O(log n) per question, and list the history."""

    def decide(
        self,
        connector_id: str,
        target: datetime | int,
        *,
        criterion: Criterion | str = Criterion.ENDED_AFTER,
        now: int | None = None,
        **flags: Unpack[Flags],
    ) -> Decision:
        """Decide SUCCESS, FAIL or WAIT for ``connector_id`` at ``target`` (one round trip).

        ``flags`` are ``decision.decide``'s: ``propagate_failures_forward``,
        ``always_wait_when_syncing``, ``wait_when_paused``. Raises ValueError naming the
        valid criteria for an unknown ``criterion``.
        """
        target_ms, crit = target_and_criterion(target, criterion)
        facts = self.facts(connector_id, target_ms, now, crit is Criterion.STARTED_AFTER)
        return decide(facts, criterion=crit, **flags)

    def facts(
        self, connector_id: str, target_ms: int, now: int | None = None, started_after: bool = False
    ) -> Facts:
        """Fetch what decide() needs for ``target_ms``: one round trip, O(log n) reads."""
        pipe = self._facts_pipeline(connector_id, target_ms, now, started_after)
        return facts_from_results(pipe.execute(), target_ms)

    def known(self, connector_id: str) -> bool:
        """Return whether any event of ``connector_id`` was recorded."""
        return bool(self.client.hexists(connectors_key(self.prefix), connector_id))

    def syncs(
        self,
        connector_id: str,
        since_ms: int | None = None,
        until_ms: int | None = None,
        limit: int = 100,
        now: int | None = None,
    ) -> list[dict[str, Any]]:
        """List the connector's syncs, newest first: completions, and running ones on top.

        A running sync that started before the maximum sync duration is listed as STALE.
        """
        keys = self.keys(connector_id)
        lo = "-inf" if since_ms is None else since_ms
        hi = "+inf" if until_ms is None else until_ms
        pipe = self.client.pipeline(transaction=False)
        # Completions live in three sets by outcome: the newest ``limit`` of each cover the
        # newest ``limit`` of all.
        for key in (keys.ok, keys.fail, keys.other, keys.running):
            pipe.zrevrangebyscore(key, hi, lo, start=0, num=limit, withscores=True)
        *ends, running = pipe.execute()
        running_from = self.running_from(now)
        rows: list[tuple[int, dict[str, Any]]] = []
        for member, score in running:
            item = RunningSync(as_text(member), int(score)).to_dict()
            if score < running_from:
                item["status"] = "STALE"
                item["reason"] = "no sync_end within the maximum sync duration"
            rows.append((int(score), item))
        completions = [decode_completion(m, s) for found in ends for m, s in found]
        rows += [(c.ended_ms, c.to_dict()) for c in completions]
        rows.sort(key=lambda r: r[0], reverse=True)
        return [item for _, item in rows[:limit]]

    def connectors(self, now: int | None = None) -> list[dict[str, Any]]:
        """List known connectors with their last success, last failure, running sync and
        lifecycle (paused, deleted, broken: ``decision.Lifecycle``)."""
        raw = {as_text(k): v for k, v in self.client.hgetall(connectors_key(self.prefix)).items()}
        ids = sorted(raw)
        pipe, running_from = self.client.pipeline(transaction=False), self.running_from(now)
        for cid in ids:
            newest_commands(pipe, self.keys(cid), running_from)
        out = []
        for cid, (ok, fail, running) in zip(ids, newest_from_results(pipe.execute()), strict=True):
            meta = json.loads(raw[cid])
            out.append(
                {
                    "connector_id": cid,
                    "connector_name": meta.get("name"),
                    "connector_type": meta.get("type"),
                    "group_id": meta.get("group"),
                    "last_event_at": meta.get("last_event_at"),
                    "last_success": ok.to_dict() if ok else None,
                    "last_failure": fail.to_dict() if fail else None,
                    "running": running.to_dict() if running else None,
                    "lifecycle": Lifecycle.from_meta(meta).to_dict(),
                }
            )
        return out


class AsyncHistoryReader(_Reader):
    """Fetch ``Facts`` and decide over ``redis.asyncio`` without blocking the event loop."""

    async def decide(
        self,
        connector_id: str,
        target: datetime | int,
        *,
        criterion: Criterion | str = Criterion.ENDED_AFTER,
        now: int | None = None,
        **flags: Unpack[Flags],
    ) -> Decision:
        """Decide for ``connector_id`` at ``target``, as ``HistoryReader.decide`` does."""
        target_ms, crit = target_and_criterion(target, criterion)
        facts = await self.facts(connector_id, target_ms, now, crit is Criterion.STARTED_AFTER)
        return decide(facts, criterion=crit, **flags)

    async def facts(
        self, connector_id: str, target_ms: int, now: int | None = None, started_after: bool = False
    ) -> Facts:
        """Fetch what decide() needs for ``target_ms``: one round trip, O(log n) reads."""
        pipe = self._facts_pipeline(connector_id, target_ms, now, started_after)
        return facts_from_results(await pipe.execute(), target_ms)
