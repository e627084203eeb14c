"""The Redis history: idempotent, order-independent, atomic, bounded by retention."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import pytest
import redis
from redis.typing import EncodableT

from fivetran_events import Event, HistoryReader, HistoryWriter, WriteStatus, decode_completion
from fivetran_events.keys import ConnectorKeys
from fivetran_events.timeutil import iso, to_ms
from testkit.support import at, ev


@dataclass(frozen=True)
class LuaHook:
    """An on_success: ``lua`` runs in the record script with the keys and args of ``parts``."""

    lua: str
    parts: Callable[[Event], tuple[list[str], list[EncodableT]]]

    def __call__(self, event: Event) -> tuple[list[str], list[EncodableT]]:
        return self.parts(event)


#: Writes one more key in the delivery's script.
set_side = LuaHook(
    "if #KEYS > k0 then redis.call('SET', KEYS[k0 + 1], '1') end", lambda e: (["test:side"], [])
)
#: Queues the sync id, as the webhook queues a job.
push_job = LuaHook(
    "if #KEYS > k0 then redis.call('RPUSH', KEYS[k0 + 1], ARGV[a0 + 1]) end",
    lambda e: (["test:jobs"], [e.sync_id or ""]),
)
#: Its command fails when the script runs it (test:h is a hash).
incr_h = LuaHook(
    "if #KEYS > k0 then redis.call('INCR', KEYS[k0 + 1]) end", lambda e: (["test:h"], [])
)


@dataclass(frozen=True)
class EverySyncHook(LuaHook):
    """A LuaHook that asks to run for every sync_start and sync_end (as lineage does)."""

    every_sync: bool = True


def members(client: redis.Redis, key: str) -> list[bytes]:
    return cast("list[bytes]", client.zrange(key, 0, -1))


class TestIdempotence:
    def test_redelivery_changes_nothing(self, writer: HistoryWriter, client: redis.Redis) -> None:
        """The same sync_end twice: recorded, then duplicate, with every key unchanged."""
        e = ev(sync_id="s1", created=at(3))
        assert writer.record(e).status is WriteStatus.RECORDED
        snapshot = {k: client.dump(k) for k in client.keys("test:h:*")}
        assert writer.record(e).status is WriteStatus.DUPLICATE
        assert {k: client.dump(k) for k in client.keys("test:h:*")} == snapshot

    def test_failed_then_successful_same_sync(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        """A retried sync ending FAILED then SUCCESSFUL under one id records both."""
        writer.record(ev(sync_id="s1", status="FAILED", created=at(3, 1), reason="x"))
        writer.record(ev(sync_id="s1", status="SUCCESSFUL", created=at(3, 2)))
        rows = reader.syncs("assimilate_seem")
        assert [(r["sync_id"], r["status"]) for r in rows] == [
            ("s1", "SUCCESSFUL"),
            ("s1", "FAILED"),
        ]

    def test_start_redelivered_is_duplicate(self, writer: HistoryWriter) -> None:
        e = ev("sync_start", sync_id="s1", created=at(3))
        assert writer.record(e).status is WriteStatus.RECORDED
        assert writer.record(e).status is WriteStatus.DUPLICATE


class TestOrdering:
    def test_end_before_start(self, writer: HistoryWriter, reader: HistoryReader) -> None:
        """A sync_end arriving before its sync_start: not running, start time still known."""
        writer.record(ev(sync_id="s1", created=at(3, 2)))
        writer.record(ev("sync_start", sync_id="s1", created=at(3, 1)))
        assert reader.facts("assimilate_seem", 0, now=to_ms(at(3, 3))).running is None
        assert reader.client.zscore(reader.keys("assimilate_seem").starts, "s1") == to_ms(at(3, 1))
        assert reader.syncs("assimilate_seem")[0]["started_at"] == iso(at(3, 1))

    def test_completions_ordered_by_created_not_arrival(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        """The later event, delivered first, still counts as the latest completion."""
        writer.record(ev(sync_id="late", status="FAILED", created=at(5)))
        writer.record(ev(sync_id="early", status="SUCCESSFUL", created=at(4)))
        facts = reader.facts("assimilate_seem", to_ms(at(6)))
        assert facts.latest_before_target is not None
        assert facts.latest_before_target.sync_id == "late"
        assert [r["sync_id"] for r in reader.syncs("assimilate_seem")] == ["late", "early"]


class TestRunning:
    def test_running_until_end(self, writer: HistoryWriter, reader: HistoryReader) -> None:
        writer.record(ev("sync_start", sync_id="s1", created=at(3)))
        running = reader.facts("assimilate_seem", 0, now=to_ms(at(3, 1))).running
        assert running is not None and running.sync_id == "s1"
        writer.record(ev(sync_id="s1", created=at(3, 2)))
        assert reader.facts("assimilate_seem", 0, now=to_ms(at(3, 3))).running is None

    def test_stale_running_sync_is_ignored(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        """A sync whose sync_end never came stops counting as running after the limit."""
        writer.record(ev("sync_start", sync_id="lost", created=at(3)))
        assert reader.facts("assimilate_seem", 0, now=to_ms(at(3, 23))).running is not None
        assert reader.facts("assimilate_seem", 0, now=to_ms(at(4, 1))).running is None
        assert reader.syncs("assimilate_seem", now=to_ms(at(5)))[0]["status"] == "STALE"

    def test_rescheduled_ends_running_but_is_no_completion(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        writer.record(ev("sync_start", sync_id="s1", created=at(3)))
        writer.record(ev(sync_id="s1", status="RESCHEDULED", created=at(3, 1)))
        assert reader.facts("assimilate_seem", 0, now=to_ms(at(3, 2))).running is None
        facts = reader.facts("assimilate_seem", to_ms(at(4)))
        assert facts.latest_before_target is None
        assert reader.syncs("assimilate_seem")[0]["status"] == "RESCHEDULED"


class TestRetention:
    def test_old_history_is_trimmed(self, client: redis.Redis) -> None:
        """Writes trim every set to the retention window; older deliveries are ignored."""
        w = HistoryWriter(client, "test:", retention_ms=10 * 86_400_000, trim_every=1)
        w.record(ev(sync_id="old", created=at(1)), now=to_ms(at(2)))
        w.record(ev(sync_id="new", created=at(20)), now=to_ms(at(20)))
        keys = ConnectorKeys("test:", "assimilate_seem")
        ok = cast("list[tuple[bytes, float]]", client.zrange(keys.ok, 0, -1, withscores=True))
        assert [decode_completion(m, t).sync_id for m, t in ok] == ["new"]
        assert client.zcard(keys.seen) == 1
        late = w.record(ev(sync_id="older", created=at(2)), now=to_ms(at(20)))
        assert late.status is WriteStatus.IGNORED
        assert client.zcard(keys.ok) == 1


class TestAtomicity:
    def test_hook_runs_inside_the_transaction(
        self, writer: HistoryWriter, client: redis.Redis
    ) -> None:
        """What on_success adds is written with the history write, or neither is."""

        def crash(event: Event) -> tuple[list[str], list[EncodableT]]:
            raise RuntimeError("crash before the script is sent")

        boom = LuaHook(set_side.lua, crash)

        with pytest.raises(RuntimeError):
            writer.record(ev(sync_id="s1", created=at(3)), on_success=boom)
        assert client.keys("test:*") == []
        writer.record(ev(sync_id="s1", created=at(3)), on_success=set_side)
        assert client.get("test:side") == b"1"
        assert client.zcard(ConnectorKeys("test:", "assimilate_seem").ok) == 1

    def test_publishes_a_change(self, writer: HistoryWriter, client: redis.Redis) -> None:
        """Every recorded event is announced on the connector's channel (the trigger wakes)."""
        sub = client.pubsub()
        sub.subscribe("test:changes:assimilate_seem")
        sub.get_message(timeout=1)
        writer.record(ev(sync_id="s1", created=at(3)))
        msg = sub.get_message(timeout=2)
        assert msg is not None and msg["data"] == b"sync_end"
        sub.close()


class TestOneRoundTrip:
    """A write is one script, sent by its SHA in one round trip."""

    def test_one_round_trip_per_write(
        self, writer: HistoryWriter, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Each write, recorded or duplicate, start or end, costs one round trip."""
        # Connect, and let Redis learn the script: a new connection sends its own setup.
        writer.record(ev(sync_id="warm", created=at(2)), on_success=push_job)
        sends = []
        real = redis.connection.AbstractConnection.send_packed_command

        def counting(self: Any, command: Any, check_health: bool = True) -> Any:
            sends.append(command)
            return real(self, command, check_health)  # type: ignore[no-untyped-call]

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
        hook = push_job
        for e in (
            ev("sync_start", sync_id="s1", created=at(3)),
            ev(sync_id="s1", created=at(3, 1)),
        ):
            sends.clear()
            assert writer.record(e, on_success=hook).status is WriteStatus.RECORDED
            assert len(sends) == 1
            sends.clear()
            assert writer.record(e, on_success=hook).status is WriteStatus.DUPLICATE
            assert len(sends) == 1

    def test_duplicate_commits_nothing_of_the_hook(
        self, writer: HistoryWriter, client: redis.Redis
    ) -> None:
        """A duplicate writes nothing, of what on_success adds neither."""
        e = ev(sync_id="s1", created=at(3))
        hook = push_job
        assert writer.record(e, on_success=hook).status is WriteStatus.RECORDED
        assert writer.record(e, on_success=hook).status is WriteStatus.DUPLICATE
        assert client.lrange("test:jobs", 0, -1) == [b"s1"]

    def test_a_script_redis_lost_is_sent_again(
        self, writer: HistoryWriter, client: redis.Redis
    ) -> None:
        """After SCRIPT FLUSH (or a restart) the next write sends the text: written once."""
        writer.record(ev(sync_id="s1", created=at(3)), on_success=push_job)
        client.script_flush()
        e = ev(sync_id="s2", created=at(4))
        assert writer.record(e, on_success=push_job).status is WriteStatus.RECORDED
        assert writer.record(e, on_success=push_job).status is WriteStatus.DUPLICATE
        assert client.lrange("test:jobs", 0, -1) == [b"s1", b"s2"]
        assert client.zcard(ConnectorKeys("test:", "assimilate_seem").ok) == 2

    def test_concurrent_redeliveries_record_once(
        self, writer: HistoryWriter, client: redis.Redis
    ) -> None:
        """The same delivery from many threads at once: one recorded, one job."""
        e = ev(sync_id="s1", created=at(3))
        hook = push_job
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: writer.record(e, on_success=hook).status, range(64)))
        assert results.count(WriteStatus.RECORDED) == 1
        assert results.count(WriteStatus.DUPLICATE) == 63
        assert client.llen("test:jobs") == 1

    def test_concurrent_writes_to_one_connector_all_commit(
        self, writer: HistoryWriter, client: redis.Redis
    ) -> None:
        """Concurrent writes to one connector all land (Redis runs each script whole)."""
        events = [ev(sync_id=f"s{i}", created=at(3, i % 24)) for i in range(160)]
        hook = push_job
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda e: writer.record(e, on_success=hook).status, events))
        assert results == [WriteStatus.RECORDED] * 160
        assert client.zcard(ConnectorKeys("test:", "assimilate_seem").ok) == 160
        assert client.llen("test:jobs") == 160

    def test_error_in_the_check_commits_nothing(
        self, writer: HistoryWriter, client: redis.Redis
    ) -> None:
        """A dedup set of the wrong type raises, and the transaction is not run."""
        client.set(ConnectorKeys("test:", "assimilate_seem").seen, "not a sorted set")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            writer.record(
                ev(sync_id="s1", created=at(3)),
                on_success=set_side,
            )
        assert not client.exists("test:side")
        assert client.zcard(ConnectorKeys("test:", "assimilate_seem").ok) == 0

    def test_refusing_writes_writes_nothing(
        self, writer: HistoryWriter, client: redis.Redis
    ) -> None:
        """Redis refusing writes (here: no replica for min-replicas-to-write) refuses the
        whole script, and a later write after it recovers records the event."""
        client.config_set("min-replicas-to-write", 1)
        try:
            with pytest.raises(redis.ResponseError, match="NOREPLICAS"):
                writer.record(ev(sync_id="s1", created=at(3)), on_success=set_side)
        finally:
            client.config_set("min-replicas-to-write", 0)
        assert client.keys("test:*") == []
        assert writer.record(ev(sync_id="s1", created=at(3))).status is WriteStatus.RECORDED

    def test_error_inside_the_transaction_is_raised(
        self, writer: HistoryWriter, client: redis.Redis
    ) -> None:
        """A command of on_success's that fails when the script runs it raises."""
        client.hset("test:h", "f", "v")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            writer.record(ev(sync_id="s1", created=at(3)), on_success=incr_h)


class TestStartedAfterPaging:
    def test_finds_a_qualifying_success_beyond_the_first_page(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        """started_after pages past successes that started before the target."""
        for i in range(12):  # overlapping syncs that all started before the target
            writer.record(ev("sync_start", sync_id=f"early{i}", created=at(2)))
            writer.record(ev(sync_id=f"early{i}", created=at(3, i)))
        writer.record(ev("sync_start", sync_id="good", created=at(4)))
        writer.record(ev(sync_id="good", created=at(4, 1)))
        facts = reader.facts("assimilate_seem", to_ms(at(3)), started_after=True)
        assert any(c.sync_id == "good" for c in facts.successes_from_target)

    def test_trimming_happens_on_a_share_of_writes(self, client: redis.Redis) -> None:
        """With the default, about one write in TRIM_EVERY trims, so old entries go soon."""
        w = HistoryWriter(client, "test:", retention_ms=10 * 86_400_000)
        w.record(ev(sync_id="old", created=at(1)), now=to_ms(at(2)))
        keys = ConnectorKeys("test:", "assimilate_seem")
        for i in range(200):
            w.record(ev(sync_id=f"n{i}", created=at(25)), now=to_ms(at(25)))
        assert client.zcount(keys.ok, "-inf", to_ms(at(1))) == 0  # "old" is gone
        assert client.zcard(keys.ok) == 200


class TestEverySync:
    def test_hook_runs_for_starts_and_failures_only_when_it_asks(
        self, writer: HistoryWriter, client: redis.Redis
    ) -> None:
        """An every_sync hook adds to each sync event's script; another to successes only."""
        every = EverySyncHook(push_job.lua, push_job.parts)
        writer.record(ev("sync_start", sync_id="s1", created=at(2)), on_success=every)
        writer.record(ev(sync_id="s1", created=at(3), status="FAILURE"), on_success=every)
        writer.record(ev(sync_id="s1", created=at(3), status="FAILURE"), on_success=every)
        writer.record(ev("pause_connector", created=at(4)), on_success=every)
        assert client.lrange("test:jobs", 0, -1) == [b"s1", b"s1"]  # the duplicate adds none
        writer.record(ev("sync_start", sync_id="s2", created=at(5)), on_success=push_job)
        writer.record(ev(sync_id="s2", created=at(6), status="FAILURE"), on_success=push_job)
        writer.record(ev(sync_id="s3", created=at(7)), on_success=push_job)
        assert client.lrange("test:jobs", 0, -1) == [b"s1", b"s1", b"s3"]
