"""One sync is one record, whether the webhook delivered it or the LOG table import read it.

The import's copy of a start or an end may be dated a little differently from the
webhook's (``time_stamp`` against ``created``): within codec.SAME_SYNC_WINDOW_MS, with the
same sync id, status and details, it is the same and already known, whichever came first.
Real Redis (the suite's), the record script itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis

from fivetran_events import HistoryReader, HistoryWriter, Settings
from fivetran_events.history.codec import SAME_SYNC_WINDOW_MS
from fivetran_events.history.writer import WriteStatus
from fivetran_events.keys import ConnectorKeys, connectors_key
from fivetran_events.log_import import Summary, record_events
from fivetran_events.model import SOURCE_IMPORTED, Event
from fivetran_events.timeutil import iso
from testkit.support import at, ev

CID = "assimilate_seem"
KEYS = ConnectorKeys("test:", CID)
SID = "9a3f1c2e-4b5d-4e6f-8a7b-1c2d3e4f5a6b"
#: How far the LOG table's time of an event is from the webhook's in these tests.
OFF = timedelta(milliseconds=1500)


def sync(
    day: int = 3, sync_id: str = SID, status: str = "SUCCESSFUL", shift: timedelta = timedelta(0)
) -> list[Event]:
    return [
        ev("sync_start", sync_id=sync_id, created=at(day, 1) + shift),
        ev(sync_id=sync_id, created=at(day, 2) + shift, status=status),
    ]


def imported(events: Iterable[Event]) -> list[Event]:
    return [replace(e, source=SOURCE_IMPORTED) for e in events]


def run_import(client: redis.Redis, settings: Settings, events: Iterable[Event]) -> Summary:
    return record_events(
        client, "test:", settings.retention_ms, events, Summary(), settings.max_clock_skew_ms
    )


def state(client: redis.Redis) -> dict[str, Any]:
    """The connector's history but its dedup marks (maintenance), and its metadata."""
    out: dict[str, Any] = {
        k: client.zrange(k, 0, -1, withscores=True)
        for k in (KEYS.starts, KEYS.running, KEYS.ok, KEYS.fail, KEYS.other, KEYS.okstart)
    }
    out["meta"] = json.loads(client.hget(connectors_key("test:"), CID) or "null")
    return out


def rows(reader: HistoryReader) -> list[tuple[str, str, str | None, str | None, str | None]]:
    return [
        (r["sync_id"], r["status"], r["started_at"], r["ended_at"], r.get("source"))
        for r in reader.syncs(CID, now=int(at(20).timestamp() * 1000))
    ]


def when(t: datetime) -> str | None:
    return iso(t)


class TestWebhookFirst:
    @pytest.mark.parametrize("shift", [timedelta(0), OFF, -OFF])
    def test_the_import_finds_the_delivered_sync_known(
        self,
        shift: timedelta,
        writer: HistoryWriter,
        reader: HistoryReader,
        client: redis.Redis,
        settings: Settings,
    ) -> None:
        """The webhook's record stays as it was (its times, no mark); the import adds nothing."""
        for e in sync():
            assert writer.record(e).status is WriteStatus.RECORDED
        before = state(client)
        summary = run_import(client, settings, imported(sync(shift=shift)))
        assert (summary.recorded, summary.known) == (0, 2)
        assert rows(reader) == [(SID, "SUCCESSFUL", when(at(3, 1)), when(at(3, 2)), None)]
        assert state(client) == before

    def test_a_running_syncs_start_keeps_the_webhooks_time(
        self, writer: HistoryWriter, client: redis.Redis, settings: Settings, reader: HistoryReader
    ) -> None:
        start = sync()[0]
        writer.record(start)
        summary = run_import(client, settings, imported([sync(shift=OFF)[0]]))
        assert (summary.recorded, summary.known) == (0, 1)
        now = int(at(3, 1, 30).timestamp() * 1000)
        running = reader.facts(CID, now, now).running
        assert running is not None and running.started_ms == start.created_ms


class TestImportFirst:
    @pytest.mark.parametrize("shift", [timedelta(0), OFF, -OFF])
    def test_the_webhooks_copy_is_a_duplicate(
        self,
        shift: timedelta,
        writer: HistoryWriter,
        reader: HistoryReader,
        client: redis.Redis,
        settings: Settings,
    ) -> None:
        """The imported record stays, marked; the late deliveries write nothing."""
        summary = run_import(client, settings, imported(sync()))
        assert (summary.recorded, summary.known, summary.successes) == (2, 0, 1)
        before = state(client)
        for e in sync(shift=shift):
            assert writer.record(e).status is WriteStatus.DUPLICATE
        assert rows(reader) == [(SID, "SUCCESSFUL", when(at(3, 1)), when(at(3, 2)), "imported")]
        assert state(client) == before

    def test_an_end_without_its_start_gets_the_webhooks_start(
        self, writer: HistoryWriter, reader: HistoryReader, client: redis.Redis, settings: Settings
    ) -> None:
        """The LOG table had only the end (the start was before --since): the delivered start
        gives it its duration, and the delivered end is still the same end."""
        start, end = sync(shift=OFF)
        run_import(client, settings, imported([sync()[1]]))
        assert writer.record(start).status is WriteStatus.RECORDED
        assert writer.record(end).status is WriteStatus.DUPLICATE
        assert rows(reader) == [
            (SID, "SUCCESSFUL", when(at(3, 1) + OFF), when(at(3, 2)), "imported")
        ]


class TestTwice:
    def test_importing_again_changes_nothing_also_without_the_dedup_marks(
        self, client: redis.Redis, settings: Settings, reader: HistoryReader
    ) -> None:
        """A second run (or a re-run of a half-imported file) finds every row known."""
        events = imported(
            [*sync(3), *sync(4, "s2", "FAILURE_WITH_TASK"), *sync(5, "s3"), sync(6, "s4")[0]]
        )
        first = run_import(client, settings, events)
        assert (first.recorded, first.known) == (7, 0)
        before = state(client)
        again = run_import(client, settings, events)
        assert (again.recorded, again.known) == (0, 7)
        client.delete(KEYS.seen)  # as after the trim: content alone says known
        third = run_import(client, settings, events)
        assert (third.recorded, third.known) == (0, 7)
        assert state(client) == before
        # The running sync (s4) has no end to carry a mark yet.
        assert [r[4] for r in rows(reader)] == [None, "imported", "imported", "imported"]


class TestDistinctSyncsStayDistinct:
    def test_two_ends_of_one_sync_from_one_source_are_two_records(
        self, client: redis.Redis, settings: Settings, reader: HistoryReader
    ) -> None:
        """The window joins copies from different sources only: a retried sync that
        failed twice a minute apart, as the LOG table says, is two failures."""
        ends = imported(
            [
                ev(sync_id="s1", created=at(3, 2), status="FAILURE"),
                ev(sync_id="s1", created=at(3, 2, 1), status="FAILURE"),
            ]
        )
        assert run_import(client, settings, ends).recorded == 2
        assert len(rows(reader)) == 2

    def test_another_status_or_a_time_outside_the_window_is_another_end(
        self, writer: HistoryWriter, client: redis.Redis, settings: Settings, reader: HistoryReader
    ) -> None:
        writer.record(ev(sync_id="s1", created=at(3, 2)))
        far = timedelta(milliseconds=SAME_SYNC_WINDOW_MS + 1)
        summary = run_import(
            client,
            settings,
            imported(
                [
                    ev(sync_id="s1", created=at(3, 2), status="FAILURE"),
                    ev(sync_id="s1", created=at(3, 2) + far),
                ]
            ),
        )
        assert (summary.recorded, summary.known) == (2, 0)
        assert sorted(r[1] for r in rows(reader)) == ["FAILURE", "SUCCESSFUL", "SUCCESSFUL"]


class TestSkipped:
    def test_too_old_or_in_the_future(self, client: redis.Redis, settings: Settings) -> None:
        old = ev(sync_id="s1", created=datetime.now(tz=at(1).tzinfo) - timedelta(days=900))
        future = ev(sync_id="s2", created=datetime.now(tz=at(1).tzinfo) + timedelta(days=2))
        summary = run_import(client, settings, imported([old, future]))
        assert summary.skipped == {
            "older than the history retention": 1,
            "dated in the future": 1,
        }
        assert summary.recorded == 0
