"""Reading Fivetran's LOG table (fivetran_events/log_import.py) and the imported mark.

The rows are shaped as the Platform Connector writes them: ``connection_id`` (newer) or
``connector_id`` (older, whose oldest rows hold the connector's name), ``message_data``
as JSON text, column names in each warehouse's case.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from fivetran_events.decision import Completion
from fivetran_events.exceptions import LogReadError
from fivetran_events.history.codec import completion_parts, decode_completion, encode_completion
from fivetran_events.log_import import (
    Columns,
    RowFilter,
    Summary,
    events_of,
    parse_time,
    read_file,
    row_event,
)
from fivetran_events.model import SOURCE_IMPORTED, EventKind
from fivetran_events.timeutil import to_ms
from testkit.support import PRIORITY_FIRST, at, ev

UUID = "0b0e3a0f-7a0b-4c39-9a1d-6e5f2b3c4d5e"
LOWER = Columns.of(["time_stamp", "connection_id", "message_event", "message_data", "sync_id"], "t")


def row(**kw: Any) -> dict[str, Any]:
    base = {
        "time_stamp": "2026-11-01 10:30:00.789",
        "connection_id": "my_conn",
        "message_event": "sync_end",
        "message_data": '{"status":"SUCCESSFUL"}',
        "sync_id": UUID,
    }
    base.update(kw)
    return {k: v for k, v in base.items() if v is not None}


class TestTimes:
    @pytest.mark.parametrize(
        "text",
        [
            "2026-11-01 10:30:00.789",  # Snowflake's TIMESTAMP_NTZ: UTC
            "2026-11-01T10:30:00.789Z",
            "2026-11-01 10:30:00.789 UTC",  # BigQuery's CSV
            "2026-11-01 10:30:00.789123",
            "2026-11-01 10:30:00.789+00:00",  # PostgreSQL's timestamptz
            "2026-11-01 11:30:00.789 +0100",
            "2026-11-01 10:30:00.789000000",
        ],
    )
    def test_every_warehouse_spelling_is_the_same_instant(self, text: str) -> None:
        assert parse_time(text) == to_ms(datetime(2026, 11, 1, 10, 30, 0, 789000, timezone.utc))

    def test_a_datetime_from_the_database_naive_is_utc(self) -> None:
        naive = datetime(2026, 11, 1, 10, 30)
        aware = datetime(2026, 11, 1, 11, 30, tzinfo=timezone(timedelta(hours=1)))
        assert parse_time(naive) == parse_time(aware) == to_ms(at(1, 10, 30, month=11))

    @pytest.mark.parametrize("value", ["yesterday", "2026-13-01 00:00:00", "", 12, None])
    def test_anything_else_is_refused(self, value: Any) -> None:
        with pytest.raises(ValueError, match="time_stamp is not a time"):
            parse_time(value)


class TestRows:
    def test_a_sync_end_is_the_event_the_webhook_would_have_parsed(self) -> None:
        """Same kind, connector, sync id, status and time; only the source differs."""
        event = row_event(row(), LOWER, RowFilter())
        assert not isinstance(event, str)
        assert event.kind is EventKind.SYNC_END and event.is_success
        assert (event.connector_id, event.sync_id, event.source) == ("my_conn", UUID, "I")
        assert event.created_ms == parse_time("2026-11-01 10:30:00.789")
        webhook = ev(
            connector_id="my_conn",
            sync_id=UUID,
            created=datetime.fromtimestamp(event.created_ms / 1000, timezone.utc),
        )
        assert webhook.dedup_id == event.dedup_id  # the same event, whichever way it came

    def test_a_failure_keeps_reason_and_task_type(self) -> None:
        data = json.dumps({"status": "FAILURE_WITH_TASK", "reason": "bad", "taskType": "fix"})
        event = row_event(row(message_data=data), LOWER, RowFilter())
        assert not isinstance(event, str)
        assert (event.status, event.reason, event.task_type) == ("FAILURE_WITH_TASK", "bad", "fix")
        assert event.is_failure

    def test_the_old_connector_id_column_is_read_too(self) -> None:
        columns = Columns.of(["TIME_STAMP", "CONNECTOR_ID", "MESSAGE_EVENT", "SYNC_ID"], "t")
        event = row_event(
            {
                "TIME_STAMP": "2026-11-01 10:00:00",
                "CONNECTOR_ID": "old_conn",
                "MESSAGE_EVENT": "sync_start",
                "SYNC_ID": "s1",
            },
            columns,
            RowFilter(),
        )
        assert not isinstance(event, str)
        assert (event.kind, event.connector_id) == (EventKind.SYNC_START, "old_conn")

    @pytest.mark.parametrize(
        ("changes", "why"),
        [
            ({"message_event": "write_to_table_start"}, "not a sync event"),
            ({"message_event": None}, "not a sync event"),
            ({"connection_id": None}, "no connection_id or connector_id"),
            (
                {"connection_id": "My Postgres (prod)"},
                "connector id is not an id (old LOG rows hold the connector's name)",
            ),
            ({"time_stamp": "soon"}, "time_stamp is not a time"),
            ({"message_data": "{not json"}, "message_data is not JSON"),
            ({"message_data": "[1]"}, "message_data is not a JSON object"),
            ({"message_data": "{}"}, "no data.status (older tables keep it in a status row)"),
            ({"message_data": '{"status": ""}'}, "invalid data.status"),
            ({"sync_id": "a b"}, "invalid sync_id"),
        ],
    )
    def test_a_row_that_is_not_a_sync_says_why(self, changes: dict[str, Any], why: str) -> None:
        assert row_event(row(**changes), LOWER, RowFilter()) == why

    def test_a_row_without_sync_id_gets_the_webhooks_derived_id(self) -> None:
        event = row_event(row(sync_id=None), LOWER, RowFilter())
        assert not isinstance(event, str) and event.sync_id_derived

    def test_filters(self) -> None:
        since = RowFilter(since_ms=parse_time("2026-11-02 00:00:00"))
        assert row_event(row(), LOWER, since) == "before --since"
        only = RowFilter(connectors={"other"})
        assert row_event(row(), LOWER, only) == "another connector (--connector)"

    def test_events_of_counts_every_row(self) -> None:
        summary = Summary()
        rows = [row(), row(message_event="records_modified"), row(time_stamp="x")]
        assert len(list(events_of(rows, LOWER, RowFilter(), summary))) == 1
        assert summary.rows == 3
        assert dict(summary.skipped) == {"not a sync event": 1, "time_stamp is not a time": 1}


WITH_TRANSFORMATIONS = Columns.of([*LOWER.names, "transformation_id"], "t")


class TestOlderTables:
    """A sync's outcome in a ``status`` row, read as dbt_fivetran_log's connection_status
    model reads it; the older ``connector_id`` where ``connection_id`` is NULL."""

    def test_a_successful_status_row_is_the_syncs_successful_end(self) -> None:
        got = row_event(
            row(message_event="status", message_data='{"status": "SUCCESSFUL"}'),
            WITH_TRANSFORMATIONS,
            RowFilter(),
        )
        assert not isinstance(got, str)
        assert (got.kind, got.event, got.status, got.sync_id) == (
            EventKind.SYNC_END,
            "sync_end",
            "SUCCESSFUL",
            UUID,
        )
        assert got.is_success and got.source == SOURCE_IMPORTED

    def test_a_priority_first_syncs_end_is_rescheduled(self) -> None:
        data = json.dumps({"status": "RESCHEDULED", "reason": PRIORITY_FIRST})
        got = row_event(row(message_event="status", message_data=data), LOWER, RowFilter())
        assert not isinstance(got, str)
        assert (got.status, got.reason) == ("RESCHEDULED", PRIORITY_FIRST)
        assert not got.is_success and not got.is_failure

    @pytest.mark.parametrize(
        ("changes", "why"),
        [
            (
                {"message_data": '{"status": "RESCHEDULED", "reason": "quota"}'},
                "a status row without a sync's outcome",
            ),
            ({"message_data": '{"status": "FAILURE"}'}, "a status row without a sync's outcome"),
            ({"message_data": None}, "a status row without a sync's outcome"),
            ({"message_data": "says actor but not a json"}, "message_data is not JSON"),
            ({"transformation_id": "t1"}, "a transformation's status row"),
        ],
    )
    def test_other_status_rows_are_skipped(self, changes: dict[str, Any], why: str) -> None:
        r = row(message_event="status", **changes)
        assert row_event(r, WITH_TRANSFORMATIONS, RowFilter()) == why

    def test_older_rows_of_a_table_with_both_columns_name_connector_id(self) -> None:
        both = Columns.of([*LOWER.names, "connector_id"], "t")
        got = row_event(row(connection_id=None, connector_id="old_conn"), both, RowFilter())
        assert not isinstance(got, str) and got.connector_id == "old_conn"

    def test_an_outcome_in_both_a_sync_end_and_a_status_row_is_taken_once(self) -> None:
        summary = Summary()
        rows = [
            row(message_event="sync_end", time_stamp="2026-11-01 10:30:00"),
            row(message_event="status", time_stamp="2026-11-01 10:30:01"),
            row(message_event="status", time_stamp="2026-11-01 11:30:01", sync_id="s2"),
            row(message_event="sync_end", time_stamp="2026-11-01 11:30:02", sync_id="s2"),
            row(message_event="sync_end", time_stamp="2026-11-01 12:30:00", sync_id="s3"),
            row(message_event="sync_end", time_stamp="2026-11-01 12:30:00", sync_id="s3"),
        ]
        got = list(events_of(rows, LOWER, RowFilter(), summary))
        # The first read of each stays; the same row twice is left to the history.
        assert [(e.sync_id, e.created_ms) for e in got] == [
            (UUID, parse_time("2026-11-01 10:30:00")),
            ("s2", parse_time("2026-11-01 11:30:01")),
            ("s3", parse_time("2026-11-01 12:30:00")),
            ("s3", parse_time("2026-11-01 12:30:00")),
        ]
        assert dict(summary.skipped) == {"the outcome its sync_end or status row gave": 2}


#: message_data variants, valid and not, for both event kinds.
DATA: list[Any] = [
    {"status": "SUCCESSFUL"},
    {"status": "FAILURE_WITH_TASK", "reason": "x" * 8192, "taskType": "reconnect"},
    {"status": "FAILURE", "reason": {"code": 42, "why": ["a"]}, "taskType": ["t"]},
    {"status": "RESCHEDULED", "rescheduledAt": "2026-11-01T12:00:00Z"},
    {"status": "RESCHEDULED", "rescheduledAt": "whenever"},
    {"status": 3},
    {"status": ""},
    {"status": "x" * 65},
    {"status": "CANCELED", "reason": "x" * 8193},
    {"status": "FAILED", "taskType": "t" * 257},
    {"status": "FAILED", "reason": "\ud800"},
    {"status": {"odd": 1}, "tables": {"public": ["t"]}},
    {"status": "SUCCESSFUL", "rescheduledAt": 5, "taskType": "\ud800"},
    {},
]


class TestTheFastPathIsParseEvent:
    @pytest.mark.parametrize("data", DATA)
    @pytest.mark.parametrize("kind", ["sync_start", "sync_end"])
    @pytest.mark.parametrize("sync_id", [UUID, None, "a b", "s" * 129])
    def test_same_event_or_both_refuse(self, data: Any, kind: str, sync_id: str | None) -> None:
        """row_event builds what parse_event makes of the webhook body it stands for."""
        from dataclasses import replace

        from fivetran_events.exceptions import InvalidPayload
        from fivetran_events.model import parse_event

        raw = json.dumps(data).replace("\\\\ud800", "\\ud800")
        fast = row_event(
            row(message_event=kind, message_data=raw, sync_id=sync_id), LOWER, RowFilter()
        )
        body = {
            "event": kind,
            "created": "2026-11-01T10:30:00.789Z",
            "connector_id": "my_conn",
            "data": json.loads(raw),
        }
        if sync_id is not None:
            body["sync_id"] = sync_id
        try:
            slow: Any = replace(parse_event(json.dumps(body)), source=SOURCE_IMPORTED)
        except InvalidPayload:
            slow = None
        if slow is None:
            assert isinstance(fast, str) and fast.startswith(("invalid", "no data.")), fast
        else:
            assert fast == slow


class TestFiles:
    def test_csv_in_snowflakes_upper_case_with_a_cell_over_four_lines(self, tmp_path: Path) -> None:
        path = tmp_path / "log.csv"
        path.write_text(
            "ID,TIME_STAMP,CONNECTION_ID,EVENT,MESSAGE_EVENT,MESSAGE_DATA,SYNC_ID\n"
            "a1,2026-11-01 10:00:00,my_conn,INFO,sync_start,,s1\n"
            # A VARIANT exported as indented JSON: one cell over four lines.
            'a2,2026-11-01 10:30:00,my_conn,SEVERE,sync_end,"{\n  ""status"": ""FAILURE"",\n'
            '  ""reason"": ""line one\\nline two""\n}",s1\n',
            encoding="utf-8",
        )
        found = read_file(path)
        summary = Summary()
        events = list(events_of(found.rows, found.columns, RowFilter(), summary))
        assert [e.kind for e in events] == [EventKind.SYNC_START, EventKind.SYNC_END]
        assert events[1].reason == "line one\nline two"
        assert found.position() == found.size == path.stat().st_size

    def test_json_lines_with_a_bad_line_counts_it(self, tmp_path: Path) -> None:
        path = tmp_path / "log.jsonl"
        lines = [json.dumps(row()), "{broken", json.dumps(row(sync_id="s2"))]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        found = read_file(path)
        summary = Summary()
        assert len(list(events_of(found.rows, found.columns, RowFilter(), summary))) == 2
        assert summary.skipped == {"not a sync event": 1}

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("", "is empty"),
            ("time_stamp,message_event\n", "has no column connection_id or connector_id"),
            ("connection_id,message_event\n", "has no column time_stamp"),
            ('{"connection_id": "x"\n', "line 1 is not a JSON object"),
        ],
    )
    def test_an_unreadable_export_is_a_clear_error(
        self, tmp_path: Path, text: str, message: str
    ) -> None:
        path = tmp_path / "log.csv"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(LogReadError, match=message):
            read_file(path)

    def test_a_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(LogReadError, match="cannot read"):
            read_file(tmp_path / "nope.csv")


class TestTheMark:
    def test_webhook_members_are_unchanged(self) -> None:
        """No source letter for a webhook delivery: its members are as long as before."""
        end = ev(sync_id=UUID, created=at(3, 2))
        assert (
            encode_completion(end, to_ms(at(3, 1)))
            == completion_parts(UUID, "SUCCESSFUL", None, None)[0] + "255s0"
        )

    @pytest.mark.parametrize("status", ["SUCCESSFUL", "FAILED"])
    @pytest.mark.parametrize("started", [None, 1])
    def test_an_imported_member_round_trips_with_its_source(
        self, status: str, started: int | None
    ) -> None:
        from dataclasses import replace

        end = replace(ev(sync_id=UUID, created=at(3, 2), status=status), source=SOURCE_IMPORTED)
        start = None if started is None else to_ms(at(3, started))
        member = encode_completion(end, start)
        assert (
            "I" in member
            and len(member) == len(encode_completion(replace(end, source=""), start)) + 1
        )
        done = decode_completion(member, end.created_ms)
        assert (done.source, done.status, done.started_ms) == ("I", status, start)
        assert done.to_dict()["source"] == "imported"

    def test_a_tagged_member_with_a_source(self) -> None:
        """The script's ``@end`` tag comes before the source letter."""
        prefix, suffix = completion_parts("s1", "SUCCESSFUL", None, None, source="I")
        done = decode_completion(prefix + "@" + "k" + suffix, 5000)
        assert (done.sync_id, done.ended_ms, done.started_ms, done.source) == (
            "s1",
            5000,
            None,
            "I",
        )

    def test_a_webhook_completion_says_no_source(self) -> None:
        assert "source" not in Completion("s", "SUCCESSFUL", 1, True).to_dict()


class TestPrefetched:
    def test_yields_everything_in_order(self) -> None:
        from fivetran_events.log_import import prefetched

        assert list(prefetched(iter(range(10_001)), chunk=100)) == list(range(10_001))

    def test_an_error_while_reading_is_raised_to_the_caller(self) -> None:
        from fivetran_events.log_import import prefetched

        def rows() -> Iterator[int]:
            yield 1
            raise LogReadError("the database went away")

        with pytest.raises(LogReadError, match="went away"):
            list(prefetched(rows(), chunk=1))

    def test_stopping_early_stops_the_thread(self) -> None:
        import threading

        from fivetran_events.log_import import prefetched

        stream = prefetched(iter(range(10**9)), chunk=10, depth=2)
        assert next(stream) == 0
        stream.close()  # the caller's write failed: the reader must not run on
        assert not [t for t in threading.enumerate() if t.name == "log-import-reader"]
