"""Layout v2: what the history costs in Redis, and what lives only as long as it matters."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

import redis

from fivetran_events import HistoryReader, HistoryWriter, WriteStatus
from fivetran_events.history.writer import RECENT_MS
from fivetran_events.keys import ConnectorKeys
from fivetran_events.timeutil import iso, to_ms
from testkit.support import at, ev

CID = "assimilate_seem"
KEYS = ConnectorKeys("test:", CID)
DAY_MS = 86_400_000


def history_bytes(client: redis.Redis) -> int:
    """Every key under the test prefix, every element sampled."""
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in client.scan_iter("test:*"))


class TestBytesPerSync:
    def test_a_synced_history_costs_at_most_300_bytes_a_sync(self, client: redis.Redis) -> None:
        """400 daily syncs (UUID ids, start and end, some failures) fit 300 bytes each."""
        writer = HistoryWriter(client, "test:", retention_ms=800 * DAY_MS, trim_every=1)
        rng = random.Random(3)
        n = 400  # past the listpack limit of 128: the sets are in their large encoding
        for i in range(n):
            end = at(1) + timedelta(days=i, minutes=rng.randint(30, 90))
            sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            failed = i % 50 == 7
            now = to_ms(end) + 1
            for e in (
                ev("sync_start", sync_id=sid, created=end - timedelta(minutes=20)),
                ev(
                    sync_id=sid,
                    created=end,
                    status="FAILURE" if failed else "SUCCESSFUL",
                    **({"reason": "Connection timed out reading the source"} if failed else {}),
                ),
            ):
                assert writer.record(e, now=now).status is WriteStatus.RECORDED
        assert client.zcard(KEYS.ok) == n - n // 50
        assert history_bytes(client) / n <= 300


class TestShortLived:
    def test_dedup_marks_and_starts_leave_once_the_connector_moves_on(
        self, client: redis.Redis, reader: HistoryReader
    ) -> None:
        """seen and starts keep only RECENT_MS; completions keep their start.

        A sync that never ended stays in running (each end removes its own entry, so only
        lost syncs are left there, and a sensor's maximum duration decides about them).
        """
        writer = HistoryWriter(client, "test:", retention_ms=800 * DAY_MS, trim_every=1)
        writer.record(ev("sync_start", sync_id="old", created=at(3, 1)))
        writer.record(ev(sync_id="old", created=at(3, 2)))
        writer.record(ev("sync_start", sync_id="lost", created=at(3, 3)))  # never ends
        later = at(3, 3) + timedelta(milliseconds=RECENT_MS + 60_000)
        writer.record(ev("sync_start", sync_id="new", created=later))
        assert client.zrange(KEYS.starts, 0, -1) == [b"new"]
        assert client.zrange(KEYS.running, 0, -1) == [b"lost", b"new"]
        assert client.zcard(KEYS.seen) == 1
        old = reader.facts(CID, to_ms(at(3, 1)), started_after=True).successes_from_target
        assert [(c.sync_id, c.started_ms) for c in old] == [("old", to_ms(at(3, 1)))]

    def test_a_redelivery_after_the_window_records_nothing_new(
        self, client: redis.Redis, reader: HistoryReader
    ) -> None:
        """With its dedup mark and start gone, a late copy of an end or a start adds nothing;
        the end is still known as a duplicate, so it creates no delivery at any age."""
        writer = HistoryWriter(client, "test:", retention_ms=800 * DAY_MS, trim_every=1)
        start, end = (
            ev("sync_start", sync_id="s1", created=at(3, 1)),
            ev(sync_id="s1", created=at(3, 2)),
        )
        writer.record(start)
        writer.record(end)
        writer.record(ev(sync_id="s2", created=at(3, 2) + timedelta(milliseconds=RECENT_MS * 2)))
        history = {k: client.dump(k) for k in (KEYS.ok, KEYS.okstart, KEYS.fail, KEYS.other)}
        assert writer.record(end).status is WriteStatus.DUPLICATE  # the mark is gone, not the end
        assert writer.record(start).status is WriteStatus.DUPLICATE
        assert {k: client.dump(k) for k in history} == history
        assert reader.facts(CID, 0, now=to_ms(at(3, 3))).running is None


class TestMembers:
    def test_two_successes_of_one_sync_without_a_start_are_both_kept(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        """Same sync id, same (unknown) duration, two ends: two completions, in any order."""
        writer.record(ev(sync_id="s1", created=at(3, 5)))
        writer.record(ev(sync_id="s1", created=at(3, 2)))
        writer.record(ev(sync_id="s1", created=at(3, 5)))  # a redelivery: nothing new
        rows = reader.syncs(CID)
        assert [(r["sync_id"], r["ended_at"]) for r in rows] == [
            ("s1", iso(to_ms(at(3, 5)))),
            ("s1", iso(to_ms(at(3, 2)))),
        ]
        writer.record(ev("sync_start", sync_id="s1", created=at(3, 1)))  # late: the first's
        early = reader.facts(CID, to_ms(at(3, 1)), started_after=True).successes_from_target
        assert [(c.ended_ms, c.started_ms) for c in early][:1] == [
            (to_ms(at(3, 2)), to_ms(at(3, 1)))
        ]
