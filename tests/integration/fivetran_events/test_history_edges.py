"""The history at its edges: bounded started_after, retried syncs, metadata, the clock."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import timedelta
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from freezegun import freeze_time

from fivetran_events import (
    AsyncHistoryReader,
    HistoryReader,
    HistoryWriter,
    InvalidPayload,
    WriteStatus,
    decide,
)
from fivetran_events.keys import CONNECTOR_SETS, ConnectorKeys, connectors_key
from fivetran_events.model import Event
from fivetran_events.timeutil import iso, to_ms
from testkit.support import at, encode, ev, payload

CID = "assimilate_seem"
KEYS = ConnectorKeys("test:", CID)


def commands_run(client: redis.Redis) -> int:
    """Commands Redis ran since the last CONFIG RESETSTAT, INFO's and CONFIG's own aside."""
    stats: dict[str, Any] = client.info("commandstats")
    return sum(
        v["calls"]
        for k, v in stats.items()
        if k.split("|")[0] not in ("cmdstat_info", "cmdstat_config")
    )


def history_state(client: redis.Redis) -> dict[str, Any]:
    """Every history set of the connector but the dedup marks, plus its metadata."""
    state: dict[str, Any] = {
        k: client.zrange(k, 0, -1, withscores=True)
        for k in (getattr(KEYS, n) for n in CONNECTOR_SETS)
        if k != KEYS.seen
    }
    # Its content, not its bytes: Lua's cjson writes an object's keys in no fixed order.
    state["meta"] = json.loads(client.hget(connectors_key("test:"), CID) or "null")
    return state


class TestStartedAfterIsBounded:
    """A started_after decision is one round trip of O(log n) reads, whatever the history."""

    N = 1000  # successes with no recorded start, all after the target

    @pytest.fixture
    def long_history(self, writer: HistoryWriter) -> int:
        """N successes whose starts were never recorded, then one that started in time."""
        base = to_ms(at(2))
        for i in range(self.N):
            e = ev(sync_id=f"nostart{i}", created=at(3) + timedelta(minutes=i))
            assert writer.record(e).status is WriteStatus.RECORDED
        last = at(3) + timedelta(minutes=self.N + 10)
        writer.record(ev("sync_start", sync_id="good", created=last))
        writer.record(ev(sync_id="good", created=last + timedelta(minutes=5)))
        return base

    def test_sync_reader(
        self, long_history: int, reader: HistoryReader, client: redis.Redis
    ) -> None:
        """Past 1,000 successes without a start, the one that started after T: 8 commands."""
        client.config_resetstat()
        facts = reader.facts(CID, long_history, started_after=True)
        assert commands_run(client) <= 8
        d = decide(facts, criterion="started_after")
        assert d.outcome.value == "success" and d.sync is not None
        assert d.sync.sync_id == "good"

    def test_async_reader(self, long_history: int, redis_url: str, client: redis.Redis) -> None:
        """The triggerer's reader does the same: one await, a bounded number of commands."""

        async def run() -> Any:
            aclient = aredis.Redis.from_url(redis_url)
            try:
                areader = AsyncHistoryReader(aclient, "test:", 24 * 3600 * 1000)
                await aclient.ping()  # connect first: a connection's setup is not a read
                client.config_resetstat()
                return await areader.facts(CID, long_history, started_after=True)
            finally:
                await aclient.aclose()

        facts = asyncio.run(run())
        assert commands_run(client) <= 8
        d = decide(facts, criterion="started_after")
        assert d.outcome.value == "success" and d.sync is not None
        assert d.sync.sync_id == "good"


RETRY = {  # one sync id: attempt 1 fails, attempt 2 (started after that) succeeds
    "start1": ("sync_start", at(3, 1), None),
    "failed": ("sync_end", at(3, 2), "FAILED"),
    "start2": ("sync_start", at(3, 3), None),
    "success": ("sync_end", at(3, 4), "SUCCESSFUL"),
}


def retry_event(name: str) -> Event:
    kind, created, status = RETRY[name]
    return ev(kind, sync_id="s1", created=created, status=status)


class TestRetriedSync:
    def test_start_after_a_failed_end_runs_again(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        """A sync_start after the same id's FAILED end, later in time, is running again."""
        for name in ("start1", "failed", "start2"):
            writer.record(retry_event(name))
        running = reader.facts(CID, 0, now=to_ms(at(3, 3, 30))).running
        assert running is not None and running.started_ms == to_ms(at(3, 3))
        facts = reader.facts(CID, to_ms(at(3, 5)), now=to_ms(at(3, 3, 30)))
        assert facts.running is not None and facts.running.sync_id == "s1"

    @pytest.mark.parametrize(
        "order", list(itertools.permutations(RETRY)), ids=lambda o: "-".join(o)
    )
    def test_every_arrival_order_counts_the_attempt_that_succeeded(
        self,
        order: tuple[str, ...],
        writer: HistoryWriter,
        reader: HistoryReader,
        client: redis.Redis,
    ) -> None:
        """Whatever the order, started_after sees the success start at 03:00, not 01:00.

        Each delivery also arrives twice (a duplicate), and once more after its dedup
        mark is gone: starts and ends are idempotent on their content too.
        """
        for name in order:
            assert writer.record(retry_event(name)).status is WriteStatus.RECORDED
            assert writer.record(retry_event(name)).status is WriteStatus.DUPLICATE
        before = history_state(client)
        client.delete(KEYS.seen)
        for name in order:
            writer.record(retry_event(name))
        assert history_state(client) == before

        target = to_ms(at(3, 2, 30))  # after attempt 1 failed, before attempt 2 started
        d = decide(reader.facts(CID, target, started_after=True), criterion="started_after")
        assert d.outcome.value == "success" and d.sync is not None
        assert d.sync.started_ms == to_ms(at(3, 3))
        rows = reader.syncs(CID, now=to_ms(at(3, 5)))
        assert [(r["status"], r["started_at"]) for r in rows] == [
            ("SUCCESSFUL", iso(at(3, 3))),
            ("FAILED", iso(at(3, 1))),
        ]
        assert reader.facts(CID, 0, now=to_ms(at(3, 5))).running is None


def without(body: dict[str, Any], *fields: str) -> Event:
    from fivetran_events import parse_event

    return parse_event(encode({k: v for k, v in body.items() if k not in fields}))


class TestConnectorMetadata:
    def test_only_moves_forward(self, writer: HistoryWriter, reader: HistoryReader) -> None:
        """A late older event keeps last_event_at and the newer name; no name blanks none."""
        newer = payload(sync_id="s2", created=at(5))
        newer["connector_name"] = "renamed"
        writer.record(without(newer))
        older = payload(sync_id="s1", created=at(3))
        writer.record(without(older, "connector_type"))
        (row,) = reader.connectors(now=to_ms(at(6)))
        assert row["last_event_at"] == iso(at(5))
        assert row["connector_name"] == "renamed"
        writer.record(without(payload(sync_id="s3", created=at(6)), "connector_name"))
        (row,) = reader.connectors(now=to_ms(at(6)))
        assert row["last_event_at"] == iso(at(6))
        assert (row["connector_name"], row["connector_type"], row["group_id"]) == (
            "renamed",
            "google_cloud_postgresql",
            "inappropriate_implode",
        )

    def test_older_event_fills_what_is_missing(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        """The newest event had no type: a late older one supplies it, nothing else."""
        writer.record(without(payload(sync_id="s2", created=at(5)), "connector_type"))
        older = payload(sync_id="s1", created=at(3))
        older["connector_name"] = "old name"
        writer.record(without(older))
        (row,) = reader.connectors(now=to_ms(at(6)))
        assert (row["connector_name"], row["connector_type"], row["last_event_at"]) == (
            "ftar_pg",
            "google_cloud_postgresql",
            iso(at(5)),
        )


class TestWallClock:
    """Where the wall clock decides, freezegun sets it: nothing else reads the time."""

    def test_running_exactly_at_the_maximum_duration(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        """Started 24 h ago to the millisecond: running; one millisecond later: stale."""
        with freeze_time(at(3)):
            writer.record(ev("sync_start", sync_id="long", created=at(3)))
        limit = at(4)  # the default maximum sync duration is 24 h
        with freeze_time(limit):
            assert reader.facts(CID, 0).running is not None
            assert reader.facts(CID, to_ms(at(5))).running is not None
            assert reader.syncs(CID)[0]["status"] == "RUNNING"
            assert reader.connectors()[0]["running"] is not None
        with freeze_time(limit + timedelta(milliseconds=1)):
            assert reader.facts(CID, 0).running is None
            assert reader.facts(CID, to_ms(at(5))).running is None
            assert reader.syncs(CID)[0]["status"] == "STALE"
            assert reader.connectors()[0]["running"] is None

    def test_future_created_is_refused_and_writes_nothing(
        self, writer: HistoryWriter, client: redis.Redis
    ) -> None:
        """More than the allowed skew ahead of the clock: InvalidPayload, no key written."""
        skew = 3600 * 1000
        now = at(3)
        with freeze_time(now):
            ahead = now + timedelta(milliseconds=skew + 1)
            with pytest.raises(InvalidPayload) as err:
                writer.record(ev(sync_id="s1", created=ahead), max_clock_skew_ms=skew)
            assert err.value.field == "created"
            assert client.keys("test:*") == []
            at_limit = now + timedelta(milliseconds=skew)
            result = writer.record(ev(sync_id="s1", created=at_limit), max_clock_skew_ms=skew)
            assert result.status is WriteStatus.RECORDED
