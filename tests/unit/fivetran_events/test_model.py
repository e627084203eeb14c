"""Parsing Fivetran payloads as they really arrive."""

from __future__ import annotations

import json

import pytest

from fivetran_events import EventKind, InvalidPayload, parse_event
from testkit.support import payload

pytestmark = pytest.mark.unit

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


class TestRefuses:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            (b"not json", "body"),
            (b"[1,2]", "body"),
            (b'{"created":"2026-01-01T00:00:00Z"}', "event"),
            (json.dumps({**payload(), "created": "yesterday"}).encode(), "created"),
            (json.dumps({**payload(), "created": "9999-12-31T23:59:59-14:00"}).encode(), "created"),
            (json.dumps({**payload(), "created": "0001-01-01T00:00:00+14:00"}).encode(), "created"),
            (
                json.dumps({k: v for k, v in payload().items() if k != "sync_id"}).encode(),
                "sync_id",
            ),
            (json.dumps({**payload(), "data": {}}).encode(), "data.status"),
            (json.dumps({**payload(), "data": {"status": "DONE"}}).encode(), "data.status"),
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
