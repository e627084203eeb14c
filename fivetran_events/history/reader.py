"""Every read of the history's keys: the one decision, the listings, the lookups.

The triggerer, where a blocking call would stall every deferred task, decides through
``AsyncHistoryReader``: the same reads (``facts_commands``) decoded the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
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
    overdue_fail,
    parse_criterion,
)
from ..freshness import Freshness, Schedule
from ..keys import ConnectorKeys, connectors_key
from ..text import as_text
from ..timeutil import now_ms, to_ms, to_utc
from .codec import decode_completion

if TYPE_CHECKING:  # typing.Unpack is 3.11's; pydantic brings typing_extensions
    from typing_extensions import Unpack

#: Successes fetched by end time for one decision (the first counts under ended_after;
#: the others let started_after pick the earliest-ended of overlapping syncs).
SUCCESS_PAGE = 8

#: A connector's newest success, failure and running sync (each None when there is none).
Newest = tuple[Completion | None, Completion | None, RunningSync | None]


@dataclass(frozen=True)
class ConnectorRecord:
    """A connector's entry in the connectors hash: what its newest events said of it."""

    connector_id: str
    name: str | None = None
    type: str | None = None
    group: str | None = None
    last_event_at: str | None = None
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    #: Fivetran's schedule as reconcile last read it (None: never read).
    schedule: Schedule | None = None

    @property
    def stopped(self) -> bool:
        """Paused (by Fivetran's list or a lifecycle event) or deleted."""
        return self.lifecycle.stopped or (self.schedule is not None and self.schedule.paused)

    @classmethod
    def decode(cls, connector_id: str | bytes, raw: str | bytes | None) -> ConnectorRecord:
        """Read one hash value (None: a connector never recorded)."""
        meta = json.loads(raw) if raw else {}
        return cls(
            connector_id=as_text(connector_id),
            name=meta.get("name") or None,
            type=meta.get("type") or None,
            group=meta.get("group") or None,
            last_event_at=meta.get("last_event_at") or None,
            lifecycle=Lifecycle.from_meta(meta),
            schedule=Schedule.from_meta(meta.get("schedule")),
        )

    @classmethod
    def decode_all(cls, raw: dict[Any, Any]) -> list[ConnectorRecord]:
        """Read a whole hash (HGETALL's reply), sorted by connector id."""
        return sorted((cls.decode(k, v) for k, v in raw.items()), key=lambda r: r.connector_id)


def extra_commands(pipe: Any, keys: ConnectorKeys, sync_id: str, ended_ms: int) -> None:
    """Queue the reads of a success's ``extra`` (``deliveries.extra_for``)."""
    pipe.zrangebyscore(keys.ok, ended_ms, ended_ms, withscores=True)
    pipe.zscore(keys.starts, sync_id)
    pipe.zrevrangebyscore(keys.ok, f"({ended_ms}", "-inf", start=0, num=1, withscores=True)


def resync_commands(pipe: Any, keys: ConnectorKeys, ended_ms: int, previous: Sequence[Any]) -> None:
    """Queue the resyncs since the previous success (they make it a full refresh)."""
    since = f"({int(previous[0][1])}" if previous else "-inf"
    pipe.zrangebyscore(keys.resyncs, since, ended_ms)


def decode_resyncs(members: Iterable[Any]) -> list[dict[str, Any]]:
    return [json.loads(as_text(m) or "{}") for m in members]


def facts_commands(
    pipe: Any,
    keys: ConnectorKeys,
    target_ms: int,
    running_from_ms: int,
    started_after: bool = False,
) -> None:
    """Queue the reads that make up Facts on a sync or async pipeline (7 or 8 commands)."""
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
        # The first success started at or after the target: one O(log n) read of ``okstart``.
        pipe.zrangebyscore(keys.okstart, target_ms, "+inf", start=0, num=1, withscores=True)


def _one(rows: Sequence[tuple[Any, float]]) -> Completion | None:
    return decode_completion(*rows[0]) if rows else None


def _running(rows: Sequence[tuple[Any, float]]) -> RunningSync | None:
    return RunningSync(as_text(rows[0][0]), int(rows[0][1])) if rows else None


def facts_from_results(results: Sequence[Any], target_ms: int) -> Facts:
    ok_rows, fail_rows, ok_before, fail_before, running_rows, other, meta = results[:7]
    record = None if meta is None else json.loads(meta)
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
        lifecycle=None if record is None else Lifecycle.from_meta(record),
        latest_success_before_target=_one(ok_before),
        schedule=None if record is None else Schedule.from_meta(record.get("schedule")),
    )


def newest_commands(pipe: Any, keys: ConnectorKeys, running_from_ms: int) -> None:
    """Queue the reads of a connector's ``Newest`` (3 commands)."""
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
    target_ms = target if isinstance(target, int) else to_ms(to_utc(target))
    return target_ms, parse_criterion(criterion)


class _Reader:
    def __init__(
        self,
        client: Any,
        prefix: str,
        max_sync_duration_ms: int,
        freshness: Freshness | None = None,
    ) -> None:
        self.client = client  # a redis.Redis, or a redis.asyncio.Redis for the async reader
        self.prefix = prefix
        self.max_sync_duration_ms = max_sync_duration_ms
        #: What makes a connector overdue (the grace setting, the explicit objectives).
        self.freshness = freshness or Freshness()

    def keys(self, connector_id: str) -> ConnectorKeys:
        return ConnectorKeys(self.prefix, connector_id)

    def running_from(self, now: int | None) -> int:
        """The earliest start of a sync still running at ``now`` (the wall clock if None);
        inclusive: only a sync that has run longer than the maximum is taken as lost."""
        return (now_ms() if now is None else now) - self.max_sync_duration_ms

    def overdue(
        self, cid: str, facts: Facts, decision: Decision, after_s: float | None, now: int | None
    ) -> Decision:
        """``decision``, or a FAIL past ``fail_when_overdue_after`` (decision.overdue_fail)."""
        if after_s is None:  # the common case: nothing to build
            return decision
        life = facts.lifecycle or Lifecycle()
        rec = ConnectorRecord(cid, lifecycle=life, schedule=facts.schedule)
        clock = now_ms() if now is None else now
        return overdue_fail(decision, facts, rec, self.freshness, after_s, clock)

    def _facts_pipeline(
        self, connector_id: str, target_ms: int, now: int | None, started_after: bool
    ) -> Any:
        pipe = self.client.pipeline(transaction=False)
        facts_commands(
            pipe, self.keys(connector_id), target_ms, self.running_from(now), started_after
        )
        return pipe


class HistoryReader(_Reader):
    """Answer the sensor's questions in O(log n) each, and list the history."""

    def decide(
        self,
        connector_id: str,
        target: datetime | int,
        *,
        criterion: Criterion | str = Criterion.ENDED_AFTER,
        now: int | None = None,
        fail_when_overdue_after: float | None = None,
        **flags: Unpack[Flags],
    ) -> Decision:
        """Decide SUCCESS, FAIL or WAIT for ``connector_id`` at ``target`` (one round trip)."""
        target_ms, crit = target_and_criterion(target, criterion)
        facts = self.facts(connector_id, target_ms, now, crit is Criterion.STARTED_AFTER)
        return self.overdue(
            connector_id,
            facts,
            decide(facts, criterion=crit, **flags),
            fail_when_overdue_after,
            now,
        )

    def facts(
        self, connector_id: str, target_ms: int, now: int | None = None, started_after: bool = False
    ) -> Facts:
        pipe = self._facts_pipeline(connector_id, target_ms, now, started_after)
        return facts_from_results(pipe.execute(), target_ms)

    def known(self, connector_id: str) -> bool:
        return bool(self.client.hexists(connectors_key(self.prefix), connector_id))

    def connector(self, connector_id: str) -> ConnectorRecord | None:
        raw = self.client.hget(connectors_key(self.prefix), connector_id)
        return None if raw is None else ConnectorRecord.decode(connector_id, raw)

    def connector_records(self) -> list[ConnectorRecord]:
        return ConnectorRecord.decode_all(self.client.hgetall(connectors_key(self.prefix)))

    def connector_ids(self) -> list[str]:
        return sorted(as_text(k) for k in self.client.hkeys(connectors_key(self.prefix)))

    def newest_of(
        self, connector_ids: Sequence[str], now: int | None = None
    ) -> list[tuple[ConnectorRecord, Newest]]:
        """Each connector's record and ``Newest``, in the order given (one round trip)."""
        if not connector_ids:
            return []
        pipe, running_from = self.client.pipeline(transaction=False), self.running_from(now)
        pipe.hmget(connectors_key(self.prefix), list(connector_ids))
        for cid in connector_ids:
            newest_commands(pipe, self.keys(cid), running_from)
        raws, *rest = pipe.execute()
        records = [ConnectorRecord.decode(c, r) for c, r in zip(connector_ids, raws, strict=True)]
        return list(zip(records, newest_from_results(rest), strict=True))

    def last_success(self, connector_id: str, as_of_ms: int | str = "+inf") -> Completion | None:
        rows = self.client.zrevrangebyscore(
            self.keys(connector_id).ok, as_of_ms, "-inf", start=0, num=1, withscores=True
        )
        return _one(rows)

    def success_and_previous(
        self, connector_id: str, sync_id: str, ended_ms: int
    ) -> tuple[Completion | None, Completion | None]:
        """The success of ``sync_id`` that ended at ``ended_ms`` and the success before it
        (None: the first of the history), which say the periods it completed: one round trip."""
        keys = self.keys(connector_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.zrangebyscore(keys.ok, ended_ms, ended_ms, withscores=True)
        pipe.zrevrangebyscore(keys.ok, f"({ended_ms}", "-inf", start=0, num=1, withscores=True)
        same_end, previous = pipe.execute()
        mine = (decode_completion(m, s) for m, s in same_end)
        return next((c for c in mine if c.sync_id == sync_id), None), _one(previous)

    def successes_between(
        self, connector_id: str, since_ms: int, until_ms: int, limit: int
    ) -> tuple[Completion | None, list[Completion]]:
        """The success before ``since_ms`` and at most ``limit`` successes that ended in
        [since, until], oldest first (the periods each completed): one round trip."""
        keys = self.keys(connector_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.zrevrangebyscore(keys.ok, f"({since_ms}", "-inf", start=0, num=1, withscores=True)
        pipe.zrangebyscore(keys.ok, since_ms, until_ms, start=0, num=limit, withscores=True)
        previous, rows = pipe.execute()
        return _one(previous), [decode_completion(m, s) for m, s in rows]

    def successes_since(self, connector_id: str, since_ms: int) -> list[Completion]:
        rows = self.client.zrangebyscore(
            self.keys(connector_id).ok, since_ms, "+inf", withscores=True
        )
        return [decode_completion(m, s) for m, s in rows]

    def sync_ends(
        self, connector_id: str, sync_id: str, ended_ms: int
    ) -> tuple[list[Completion], int | None]:
        """The ends of ``sync_id`` up to ``ended_ms`` within the maximum sync duration (oldest
        first), and the sync's first recorded start (None once trimmed): one round trip."""
        keys = self.keys(connector_id)
        pipe = self.client.pipeline(transaction=False)
        for key in (keys.ok, keys.fail, keys.other):
            pipe.zrangebyscore(key, ended_ms - self.max_sync_duration_ms, ended_ms, withscores=True)
        pipe.zscore(keys.starts, sync_id)
        *ends, first_start = pipe.execute()
        found = (decode_completion(m, s) for rows in ends for m, s in rows)
        mine = sorted((c for c in found if c.sync_id == sync_id), key=Completion.order_key)
        return mine, None if first_start is None else int(first_start)

    def syncs(
        self,
        connector_id: str,
        since_ms: int | None = None,
        until_ms: int | None = None,
        limit: int = 100,
        now: int | None = None,
    ) -> list[dict[str, Any]]:
        """List the connector's syncs, newest first; a running one past the maximum is STALE."""
        keys = self.keys(connector_id)
        lo = "-inf" if since_ms is None else since_ms
        hi = "+inf" if until_ms is None else until_ms
        pipe = self.client.pipeline(transaction=False)
        # Three sets by outcome: the newest ``limit`` of each cover the newest of all.
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
        clock = now_ms() if now is None else now
        return [
            {
                "connector_id": rec.connector_id,
                "connector_name": rec.name,
                "connector_type": rec.type,
                "group_id": rec.group,
                "last_event_at": rec.last_event_at,
                "last_success": ok.to_dict() if ok else None,
                "last_failure": fail.to_dict() if fail else None,
                "running": running.to_dict() if running else None,
                "lifecycle": rec.lifecycle.to_dict(),
                "schedule": rec.schedule.to_dict() if rec.schedule else None,
                **self.freshness.describe(rec, ok.ended_ms if ok else None, clock),
            }
            for rec, (ok, fail, running) in self.newest_of(self.connector_ids(), clock)
        ]


class AsyncHistoryReader(_Reader):
    """``HistoryReader``'s decision over ``redis.asyncio``, for the triggerer's loop."""

    async def decide(
        self,
        connector_id: str,
        target: datetime | int,
        *,
        criterion: Criterion | str = Criterion.ENDED_AFTER,
        now: int | None = None,
        fail_when_overdue_after: float | None = None,
        **flags: Unpack[Flags],
    ) -> Decision:
        target_ms, crit = target_and_criterion(target, criterion)
        facts = await self.facts(connector_id, target_ms, now, crit is Criterion.STARTED_AFTER)
        return self.overdue(
            connector_id,
            facts,
            decide(facts, criterion=crit, **flags),
            fail_when_overdue_after,
            now,
        )

    async def facts(
        self, connector_id: str, target_ms: int, now: int | None = None, started_after: bool = False
    ) -> Facts:
        pipe = self._facts_pipeline(connector_id, target_ms, now, started_after)
        return facts_from_results(await pipe.execute(), target_ms)

    async def connector(self, connector_id: str) -> ConnectorRecord | None:
        raw = await self.client.hget(connectors_key(self.prefix), connector_id)
        return None if raw is None else ConnectorRecord.decode(connector_id, raw)

    async def successes_page(
        self, connector_id: str, from_ms: int, offset: int, count: int
    ) -> list[Completion]:
        """``count`` successes from ``from_ms``, oldest first, after the first ``offset``."""
        rows = await self.client.zrangebyscore(
            self.keys(connector_id).ok, from_ms, "+inf", start=offset, num=count, withscores=True
        )
        return [decode_completion(m, s) for m, s in rows]
