"""Parsing Fivetran payloads as they really arrive."""

from __future__ import annotations

import json

import pytest

from fivetran_events import EventKind, InvalidPayload, parse_event
from fivetran_events.model import is_valid_id
from testkit.support import payload

REAL_CAPTURE = (
    b'{"event":"sync_end","created":"2026-05-22T00:06:08.638Z",'
    b'"connector_type":"google_cloud_postgresql","connector_id":"assimilate_seem",'
    b'"connector_name":"ftar_pg","sync_id":"b4703f73-6315-4e22-8d7a-3bfb18b2fed2",'
    b'"destination_group_id":"inappropriate_implode","data":{"status":"SUCCESSFUL"}}'
)


class TestAccepts:
    def test_real_capture(self) -> None:
        """A real capture of Fivetran's webhook parses to a sync_end with all its fields."""
        ev = parse_event(REAL_CAPTURE)
        assert ev.kind is EventKind.SYNC_END and ev.is_success
        assert ev.connector_id == "assimilate_seem"
        assert ev.connector_name == "ftar_pg"
        assert ev.group_id == "inappropriate_implode"
        assert ev.created_ms == 1779408368638

    def test_connection_names(self) -> None:
        """Newer payloads' connection_* names mean the same as connector_*."""
        ev = parse_event(json.dumps(payload(new_names=True)))
        assert ev.connector_id == "assimilate_seem" and ev.connector_name == "ftar_pg"

    def test_old_group_id(self) -> None:
        """Older payloads say group_id instead of destination_group_id."""
        body = payload()
        body["group_id"] = body.pop("destination_group_id")
        assert parse_event(json.dumps(body)).group_id == "inappropriate_implode"

    @pytest.mark.parametrize("status", ["FAILURE", "FAILURE_WITH_TASK", "FAILED"])
    def test_failure_statuses(self, status: str) -> None:
        """Every failure status is a failed completion, with its reason kept."""
        ev = parse_event(json.dumps(payload(status=status, reason="boom", taskType="t")))
        assert ev.is_failure and not ev.is_success
        assert ev.reason == "boom" and ev.task_type == "t"

    def test_rescheduled_is_not_a_completion(self) -> None:
        ev = parse_event(json.dumps(payload(status="RESCHEDULED")))
        assert not ev.is_success and not ev.is_failure

    def test_test_event_without_sync_id(self) -> None:
        """Fivetran's test_event has no sync_id and must be accepted."""
        ev = parse_event(
            b'{"event":"test_event","created":"2026-05-22T00:06:08.638Z",'
            b'"connector_type":"_connector_type","connector_id":"_connector_1",'
            b'"group_id":"_destination_1"}'
        )
        assert ev.kind is EventKind.TEST

    def test_unknown_event_kind(self) -> None:
        """Events Fivetran adds later are classified OTHER, not refused."""
        assert parse_event(b'{"event":"dbt_run_succeeded","whatever":[1]}').kind is EventKind.OTHER

    def test_resync_table_keeps_tables(self) -> None:
        ev = parse_event(json.dumps(payload(event="resync_table", tables=["a", "b"])))
        assert ev.kind is EventKind.RESYNC and ev.tables == ("a", "b")


class TestOptionalFieldsNeverRefuse:
    """Only ids, ``created`` and a sync_end's status may refuse a delivery (a refusal is
    retried for 24 hours, then disables the webhook); odd optional fields are dropped."""

    @pytest.mark.parametrize(
        ("event", "data", "dropped"),
        [
            ("resync_table", {"tables": {"public": ["orders"]}}, ("data.tables",)),
            ("resync_table", {"tables": ["a", 5]}, ("data.tables",)),
            ("resync_table", {"tables": ["a", "t" * 513]}, ("data.tables",)),
            ("resync_table", {"tables": ["a"] * 10_001}, ("data.tables",)),
            ("edit_connector", ["name", "schedule"], ("data",)),
            ("edit_connection", "changed", ("data",)),
            ("pause_connector", {"status": {"a": 1}, "reason": 5}, ("data.status", "data.reason")),
            (
                "sync_start",
                {"status": "", "rescheduledAt": ["x"]},
                ("data.status", "data.rescheduledAt"),
            ),
            (
                "sync_end",
                {"status": "FAILED", "reason": "\ud800", "taskType": 7},
                ("data.reason", "data.taskType"),
            ),
        ],
    )
    def test_odd_fields_are_dropped_and_named(
        self, event: str, data: object, dropped: tuple[str, ...]
    ) -> None:
        body = {**payload(event, sync_id="s1"), "data": data}
        ev = parse_event(json.dumps(body))  # a lone surrogate goes as the escape \\ud800
        assert ev.dropped == dropped and ev.connector_id == "assimilate_seem"
        assert ev.tables == () and ev.reason is None and ev.task_type is None

    def test_envelope_texts_are_dropped_or_cut(self) -> None:
        body = {**payload(), "connector_name": {"n": 1}, "connector_type": "t" * 300}
        ev = parse_event(json.dumps(body))
        assert ev.dropped == ("connector_name",) and ev.connector_name is None
        assert ev.connector_type == "t" * 256

    def test_long_texts_are_cut_structured_ones_kept_as_json(self) -> None:
        ev = parse_event(json.dumps(payload(status="FAILED", reason="r" * 9000, taskType=["t"])))
        assert ev.reason == "r" * 8192 and ev.task_type == '["t"]' and ev.dropped == ()

    def test_documented_shapes_drop_nothing(self) -> None:
        ev = parse_event(json.dumps(payload("resync_table", tables=["a"])))
        assert ev.tables == ("a",) and ev.dropped == ()
        assert parse_event(REAL_CAPTURE).dropped == ()

    def test_data_null_is_no_data(self) -> None:
        assert parse_event(json.dumps({**payload("edit_connector"), "data": None})).dropped == ()


#: Fivetran's test payload, as its documentation shows it
#: (https://fivetran.com/docs/rest-api/troubleshooting/sync-id-field-required-error).
DOCUMENTED_TEST_PAYLOAD = {
    "event": "test_event",
    "created": "timestamp",
    "connector_type": "_connector_type",
    "connector_id": "_connector_1",
    "group_id": "_destination_1",
}


class TestFivetranAsItIs:
    """What the real Fivetran sends beyond the documented happy path (issue #20)."""

    @pytest.mark.parametrize("status", ["CANCELED", "PARTIALLY_SUCCESSFUL", "skipped", "7"])
    def test_any_status_is_a_non_completion(self, status: str) -> None:
        """CANCELED (the platform log's) and statuses nobody knows yet are kept verbatim."""
        ev = parse_event(json.dumps(payload(status=status, reason="r")))
        assert ev.kind is EventKind.SYNC_END and ev.status == status
        assert not ev.is_success and not ev.is_failure

    def test_numeric_status_is_text(self) -> None:
        ev = parse_event(json.dumps(payload(status=7)))  # type: ignore[arg-type]
        assert ev.status == "7"

    def test_documented_test_payload(self) -> None:
        assert parse_event(json.dumps(DOCUMENTED_TEST_PAYLOAD)).kind is EventKind.TEST

    @pytest.mark.parametrize("event", ["sync_start", "sync_end", "pause_connector", "resync_table"])
    def test_sample_deliveries(self, event: str) -> None:
        """The samples of Fivetran's webhook test (``POST /v1/webhooks/{id}/test``) are
        classified SAMPLE, however incomplete: made-up ids and a created that is no time."""
        for body in (
            {**DOCUMENTED_TEST_PAYLOAD, "event": event},
            {**payload(event), "connector_id": "_connector_1"},
            {**payload(event), "created": "timestamp"},
            {"event": event, "created": "yesterday"},
        ):
            assert parse_event(json.dumps(body)).kind is EventKind.SAMPLE, body

    def test_time_out_of_range_is_not_a_sample(self) -> None:
        body = {**payload(), "created": "9999-12-31T23:59:59-14:00"}
        with pytest.raises(InvalidPayload):
            parse_event(json.dumps(body))

    @pytest.mark.parametrize("event", ["sync_start", "sync_end"])
    def test_missing_sync_id_is_derived(self, event: str) -> None:
        """A real sync event without sync_id gets one from connector and created, marked."""
        body = {k: v for k, v in payload(event, created="2026-01-02T03:04:05Z").items()}
        body.pop("sync_id")
        ev = parse_event(json.dumps(body))
        again = parse_event(json.dumps(body))
        assert ev.sync_id is not None and ev.sync_id_derived
        assert ev.sync_id == again.sync_id and ev.dedup_id == again.dedup_id
        other = parse_event(json.dumps({**body, "created": "2026-01-02T03:04:06Z"}))
        assert other.sync_id != ev.sync_id
        assert not is_valid_id(ev.sync_id)  # no real id can carry the mark

    def test_rescheduled_keeps_its_time(self) -> None:
        ev = parse_event(
            json.dumps(
                payload(
                    status="RESCHEDULED",
                    reason="quota",
                    rescheduledAt="2026-01-02T05:00:00.000Z",
                )
            )
        )
        assert ev.rescheduled_at_ms == 1767330000000 and ev.reason == "quota"

    @pytest.mark.parametrize("value", ["soon", 5, None, ["x"]])
    def test_unreadable_rescheduled_at_is_dropped(self, value: object) -> None:
        ev = parse_event(json.dumps(payload(status="RESCHEDULED", rescheduledAt=value)))
        assert ev.rescheduled_at_ms is None

    @pytest.mark.parametrize(
        ("event", "change"),
        [
            ("pause_connector", ("state", "paused")),
            ("pause_connection", ("state", "paused")),
            ("resume_connector", ("state", "active")),
            ("resume_connection", ("state", "active")),
            ("delete_connector", ("state", "deleted")),
            ("delete_connection", ("state", "deleted")),
            ("create_connector", ("state", "active")),
            ("create_connection", ("state", "active")),
            ("connection_successful", ("setup", "connected")),
            ("connection_failure", ("setup", "broken")),
            ("edit_connector", ("change", "edit_connector")),
            ("edit_connection", ("change", "edit_connector")),
            ("force_update_connector", ("change", "force_update_connector")),
            ("force_update_connection", ("change", "force_update_connector")),
        ],
    )
    def test_lifecycle_events(self, event: str, change: tuple[str, str]) -> None:
        ev = parse_event(json.dumps(payload(event)))
        assert ev.kind is EventKind.LIFECYCLE and ev.lifecycle == change

    @pytest.mark.parametrize("value", ["abc\n", "abc\r\n", "\nabc", "a b", ""])
    def test_ids_are_whole_matches(self, value: str) -> None:
        """A trailing newline is not part of a valid id (``$`` would let it through)."""
        assert not is_valid_id(value)


class TestRefuses:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            (b"not json", "body"),
            (b"[1,2]", "body"),
            (b'{"created":"2026-01-01T00:00:00Z"}', "event"),
            (json.dumps({**payload(), "created": "9999-12-31T23:59:59-14:00"}).encode(), "created"),
            (json.dumps({**payload(), "created": "0001-01-01T00:00:00+14:00"}).encode(), "created"),
            (json.dumps({**payload(), "created": 5}).encode(), "created"),
            (json.dumps({**payload(), "data": {}}).encode(), "data.status"),
            (json.dumps({**payload(), "data": {"status": ""}}).encode(), "data.status"),
            (json.dumps({**payload(), "data": {"status": "x" * 65}}).encode(), "data.status"),
            (json.dumps({**payload(), "connector_id": "a/b"}).encode(), "connector_id"),
            (json.dumps({**payload(), "connector_id": 5}).encode(), "connector_id"),
            (
                json.dumps({k: v for k, v in payload().items() if k != "connector_id"}).encode(),
                "connector_id",
            ),
        ],
    )
    def test_names_the_field(self, body: bytes, field: str) -> None:
        """A malformed body raises InvalidPayload naming the field to fix."""
        with pytest.raises(InvalidPayload) as info:
            parse_event(body)
        assert info.value.field == field
        assert field.split(".")[-1] in info.value.message or field == "body"

    def test_dedup_id_separates_failed_then_successful(self) -> None:
        """FAILED then SUCCESSFUL under one sync_id are two deliveries, not a duplicate."""
        a = parse_event(
            json.dumps(payload(sync_id="s1", status="FAILED", created="2026-01-01T00:00:00Z"))
        )
        b = parse_event(
            json.dumps(payload(sync_id="s1", status="SUCCESSFUL", created="2026-01-01T01:00:00Z"))
        )
        again = parse_event(
            json.dumps(payload(sync_id="s1", status="FAILED", created="2026-01-01T00:00:00Z"))
        )
        assert a.dedup_id != b.dedup_id
        assert a.dedup_id == again.dedup_id


def test_manual_event_table_names_every_event_and_status() -> None:
    """The manual's table of what the service does with each delivery (docs/webhook.md)
    names every event kind and status the model knows, so an addition to the model cannot
    go undocumented."""
    from pathlib import Path

    from fivetran_events.model import KNOWN_STATUSES, LIFECYCLE_EVENTS, RESYNC_EVENTS

    page = Path(__file__).resolve().parents[3] / "docs" / "webhook.md"
    rows = [
        line
        for line in page.read_text().splitlines()
        if line.startswith("| `") and "what the service does" not in line
    ]
    table = "\n".join(rows)
    names = {"sync_start", "sync_end", "test_event", *RESYNC_EVENTS, *LIFECYCLE_EVENTS}
    names |= KNOWN_STATUSES
    missing = sorted(n for n in names if f"`{n}`" not in table)
    assert rows and missing == [], missing
