"""The history reader is the one reader of the history's keys: its records and lookups."""

from __future__ import annotations

import asyncio

import redis.asyncio

from fivetran_events import HistoryReader, HistoryWriter
from fivetran_events.history import AsyncHistoryReader, ConnectorRecord
from fivetran_events.settings import Settings
from fivetran_events.timeutil import to_ms
from testkit.support import at, ev


class TestConnectorRecord:
    def test_decodes_what_the_webhook_wrote(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        writer.record(ev(connector_id="c1", sync_id="s1", created=at(2)))
        writer.record(ev("pause_connector", connector_id="c1", created=at(3)))
        rec = reader.connector("c1")
        assert rec is not None
        assert (rec.connector_id, rec.name, rec.type, rec.group) == (
            "c1",
            "ftar_pg",
            "google_cloud_postgresql",
            "inappropriate_implode",
        )
        assert rec.last_event_at is not None and rec.lifecycle.state == "paused"
        assert reader.connector("never") is None
        # The suite's Redis is shared by a worker's tests: look for ours among any others.
        assert rec in reader.connector_records() and "c1" in reader.connector_ids()


class TestLookups:
    def test_newest_of_keeps_the_order_given(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        writer.record(ev(connector_id="b", sync_id="b1", created=at(1)))
        writer.record(ev(connector_id="a", sync_id="a1", created=at(2), status="FAILURE"))
        got = reader.newest_of(["b", "a", "unknown"])
        assert [rec.connector_id for rec, _ in got] == ["b", "a", "unknown"]
        (_, (b_ok, b_fail, _)), (_, (a_ok, a_fail, _)), (nobody, newest) = got
        assert b_ok is not None and b_ok.sync_id == "b1" and b_fail is None
        assert a_ok is None and a_fail is not None and a_fail.sync_id == "a1"
        assert nobody.name is None and newest == (None, None, None)
        assert reader.newest_of([]) == []

    def test_successes_by_end(self, writer: HistoryWriter, reader: HistoryReader) -> None:
        for i in (1, 2, 3):
            writer.record(ev(connector_id="c", sync_id=f"s{i}", created=at(i)))
        writer.record(ev(connector_id="c", sync_id="f4", created=at(4), status="FAILURE"))
        last = reader.last_success("c", to_ms(at(2)))
        assert last is not None and last.sync_id == "s2"
        newest = reader.last_success("c")
        assert newest is not None and newest.sync_id == "s3"
        assert reader.last_success("c", to_ms(at(1)) - 1) is None
        assert [c.sync_id for c in reader.successes_since("c", to_ms(at(2)))] == ["s2", "s3"]
        ends, first_start = reader.sync_ends("c", "f4", to_ms(at(4)))
        assert [e.status for e in ends] == ["FAILURE"] and first_start is None
        assert reader.sync_ends("c", "s9", to_ms(at(4))) == ([], None)

    def test_the_ends_of_one_sync_within_its_duration(
        self, writer: HistoryWriter, reader: HistoryReader
    ) -> None:
        """FAILED then SUCCESSFUL under one sync id: both, oldest first; an end of the same
        id longer ago than the maximum sync duration (24 h) is another sync's."""
        writer.record(ev(connector_id="c", sync_id="t", created=at(1), status="FAILED"))
        writer.record(ev(connector_id="c", sync_id="t", created=at(3), status="FAILED"))
        writer.record(ev(connector_id="c", sync_id="t", created=at(3, 1)))
        writer.record(ev(connector_id="c", sync_id="u", created=at(3, 1)))
        ends, _ = reader.sync_ends("c", "t", to_ms(at(3, 1)))
        assert [(e.status, e.ended_ms) for e in ends] == [
            ("FAILED", to_ms(at(3))),
            ("SUCCESSFUL", to_ms(at(3, 1))),
        ]


def test_the_async_reader_reads_the_same(
    writer: HistoryWriter, settings: Settings, redis_url: str
) -> None:
    for i in (1, 2, 3):
        writer.record(ev(connector_id="c", sync_id=f"s{i}", created=at(i)))

    async def read() -> tuple[ConnectorRecord | None, list[str], list[str]]:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            areader = AsyncHistoryReader(client, settings.key_prefix, 3_600_000)
            page = await areader.successes_page("c", to_ms(at(1)), offset=1, count=5)
            first = await areader.successes_page("c", to_ms(at(1)), offset=0, count=1)
            return (
                await areader.connector("c"),
                [c.sync_id for c in page],
                [c.sync_id for c in first],
            )
        finally:
            await client.aclose()

    rec, page, first = asyncio.run(read())
    assert rec is not None and rec.name == "ftar_pg"
    assert (page, first) == (["s2", "s3"], ["s1"])
