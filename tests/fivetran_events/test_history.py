"""The Redis history: idempotent, order-independent, atomic, bounded by retention."""

from __future__ import annotations

import json

import pytest
import redis

from fivetran_events import HistoryReader, HistoryWriter, WriteStatus, parse_event
from fivetran_events.keys import ConnectorKeys
from fivetran_events.timeutil import iso, to_ms

from ..support import at, encode, payload

pytestmark = pytest.mark.redis


def ev(event: str = "sync_end", **kw):  # type: ignore[no-untyped-def]
    return parse_event(encode(payload(event, **kw)))


class TestIdempotence:
    def test_redelivery_changes_nothing(self, writer: HistoryWriter, client: redis.Redis) -> None:
        """The same sync_end twice: recorded, then duplicate, with every key unchanged."""
        e = ev(sync_id="s1", created=at(3))
        assert writer.record(e).status is WriteStatus.RECORDED
        snapshot = {k: client.dump(k) for k in client.keys("test:c:*")}
        assert writer.record(e).status is WriteStatus.DUPLICATE
        assert {k: client.dump(k) for k in client.keys("test:c:*")} == snapshot

    def test_failed_then_successful_same_sync(self, writer: HistoryWriter,
                                              reader: HistoryReader) -> None:
        """A retried sync ending FAILED then SUCCESSFUL under one id records both."""
        writer.record(ev(sync_id="s1", status="FAILED", created=at(3, 1), reason="x"))
        writer.record(ev(sync_id="s1", status="SUCCESSFUL", created=at(3, 2)))
        rows = reader.syncs("assimilate_seem")
        assert [(r["sync_id"], r["status"]) for r in rows] == [("s1", "SUCCESSFUL"),
                                                               ("s1", "FAILED")]

    def test_start_redelivered_is_duplicate(self, writer: HistoryWriter) -> None:
        e = ev("sync_start", sync_id="s1", created=at(3))
        assert writer.record(e).status is WriteStatus.RECORDED
        assert writer.record(e).status is WriteStatus.DUPLICATE


class TestOrdering:
    def test_end_before_start(self, writer: HistoryWriter, reader: HistoryReader) -> None:
        """A sync_end arriving before its sync_start: not running, start time still known."""
        writer.record(ev(sync_id="s1", created=at(3, 2)))
        writer.record(ev("sync_start", sync_id="s1", created=at(3, 1)))
        assert reader.running("assimilate_seem", now=to_ms(at(3, 3))) is None
        assert reader.start_of("assimilate_seem", "s1") == to_ms(at(3, 1))
        assert reader.syncs("assimilate_seem")[0]["started_at"] == iso(at(3, 1))

    def test_completions_ordered_by_created_not_arrival(self, writer: HistoryWriter,
                                                        reader: HistoryReader) -> None:
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
        assert reader.running("assimilate_seem", now=to_ms(at(3, 1))).sync_id == "s1"
        writer.record(ev(sync_id="s1", created=at(3, 2)))
        assert reader.running("assimilate_seem", now=to_ms(at(3, 3))) is None

    def test_stale_running_sync_is_ignored(self, writer: HistoryWriter,
                                           reader: HistoryReader) -> None:
        """A sync whose sync_end never came stops counting as running after the limit."""
        writer.record(ev("sync_start", sync_id="lost", created=at(3)))
        assert reader.running("assimilate_seem", now=to_ms(at(3, 23))) is not None
        assert reader.running("assimilate_seem", now=to_ms(at(4, 1))) is None
        assert reader.syncs("assimilate_seem", now=to_ms(at(5)))[0]["status"] == "STALE"

    def test_rescheduled_ends_running_but_is_no_completion(self, writer: HistoryWriter,
                                                           reader: HistoryReader) -> None:
        writer.record(ev("sync_start", sync_id="s1", created=at(3)))
        writer.record(ev(sync_id="s1", status="RESCHEDULED", created=at(3, 1)))
        assert reader.running("assimilate_seem", now=to_ms(at(3, 2))) is None
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
        assert [json.loads(m)["s"] for m in client.zrange(keys.ok, 0, -1)] == ["new"]
        assert client.zcard(keys.seen) == 1
        late = w.record(ev(sync_id="older", created=at(2)), now=to_ms(at(20)))
        assert late.status is WriteStatus.IGNORED
        assert client.zcard(keys.ok) == 1


class TestAtomicity:
    def test_hook_runs_inside_the_transaction(self, writer: HistoryWriter,
                                              client: redis.Redis) -> None:
        """What on_success queues commits with the history write, or neither does."""
        def boom(pipe, event):  # type: ignore[no-untyped-def]
            pipe.set("test:side", "1")
            raise RuntimeError("crash before EXEC")

        with pytest.raises(RuntimeError):
            writer.record(ev(sync_id="s1", created=at(3)), on_success=boom)
        assert client.keys("test:*") == []
        writer.record(ev(sync_id="s1", created=at(3)),
                      on_success=lambda pipe, e: pipe.set("test:side", "1"))
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


class TestStartedAfterPaging:
    def test_finds_a_qualifying_success_beyond_the_first_page(self, writer: HistoryWriter,
                                                              reader: HistoryReader) -> None:
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
        assert client.zscore(keys.ended, "old") is None
        assert client.zcard(keys.ok) == 200
