"""Every delivery the real Fivetran sends is taken (issue #20), end to end through the app.

Bodies are Fivetran's documented shapes (https://fivetran.com/docs/rest-api/getting-started/webhooks
for the events and ``sync_end``'s statuses; the test payload as
https://fivetran.com/docs/rest-api/troubleshooting/sync-id-field-required-error shows it)
and the undocumented ones the platform log and client libraries show (``CANCELED``, a
``sync_id`` left out, ``*_connection`` names), each signed as Fivetran signs them.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from fivetran_events.timeutil import iso
from testkit.support import TOKEN, answer, at, deliver, payload, post_signed

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CID = "assimilate_seem"


def syncs(http: FlaskClient, connector: str = CID) -> list[dict[str, Any]]:
    resp = http.get(f"/api/connectors/{connector}/syncs", headers=AUTH)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return answer(resp)["syncs"]  # type: ignore[no-any-return]


def connector(http: FlaskClient, cid: str = CID) -> dict[str, Any]:
    rows = answer(http.get("/api/connectors", headers=AUTH))["connectors"]
    return next(r for r in rows if r["connector_id"] == cid)


def decision(http: FlaskClient, target: str, **flags: str) -> dict[str, Any]:
    query = "&".join(f"{k}={v}" for k, v in {"target": target, **flags}.items())
    resp = http.get(f"/api/connectors/{CID}/decision?{query}", headers=AUTH)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return answer(resp)


def status_count(http: FlaskClient, status: str) -> float:
    return sample(http, f'fivetran_events_sync_end_statuses_total{{status="{status}"}}')


def sample(http: FlaskClient, key: str) -> float:
    text = http.get("/metrics").get_data(as_text=True)
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(key)), 0)


class TestEveryStatus:
    @pytest.mark.parametrize("status", ["CANCELED", "SOMETHING_FIVETRAN_ADDED"])
    def test_recorded_verbatim_as_a_non_completion(
        self, http: FlaskClient, caplog: pytest.LogCaptureFixture, status: str
    ) -> None:
        """2xx, kept verbatim (neither success nor failure), counted by status; an unknown
        status is logged once, however often it comes."""
        before = status_count(http, status)
        with caplog.at_level(logging.WARNING, logger="webhook_app.webhook"):
            for n in range(3):
                body = payload(sync_id=f"x{n}", created=at(3, n), status=status, reason="why")
                assert deliver(http, body)["status"] == "recorded"
        assert status_count(http, status) == before + 3
        logged = [r for r in caplog.records if status in r.getMessage()]
        assert len(logged) == (0 if status == "CANCELED" else 1)
        rows = syncs(http)
        assert [(r["status"], r["reason"]) for r in rows] == [(status, "why")] * 3
        # Neither success nor failure: the decision waits, and propagates nothing.
        assert decision(http, iso(at(3)) or "")["decision"] == "wait"
        assert connector(http)["last_success"] is None
        assert connector(http)["last_failure"] is None


#: Fivetran's test delivery, as its documentation shows it.
DOCUMENTED: dict[str, Any] = {
    "event": "test_event",
    "created": "timestamp",
    "connector_type": "_connector_type",
    "connector_id": "_connector_1",
    "group_id": "_destination_1",
}


class TestTestDeliveries:
    @pytest.mark.parametrize(
        "event",
        ["sync_start", "sync_end", "pause_connector", "connection_failure", "resync_table"],
    )
    def test_samples_are_answered_and_recorded_nowhere(
        self, http: FlaskClient, client: redis.Redis, event: str
    ) -> None:
        """The samples of ``POST /v1/webhooks/{id}/test``: 2xx, and no key is written."""
        bodies: list[dict[str, Any]] = [
            {**DOCUMENTED, "event": event},
            {**payload(event, created=at(3)), "connector_id": "_connector_1"},
            {**payload(event), "created": "timestamp"},
        ]
        for body in bodies:
            got = deliver(http, body)
            assert got["status"] == "ignored" and "sample" in got["reason"], got
        assert client.keys("*") == []

    def test_documented_test_event(self, http: FlaskClient) -> None:
        assert deliver(http, DOCUMENTED)["status"] == "ignored"


class TestDerivedSyncIds:
    def test_a_sync_without_sync_id_is_recorded_and_flagged(self, http: FlaskClient) -> None:
        start = payload("sync_start", created=at(3, 1))
        end = payload(created=at(3, 2), status="FAILURE", reason="no id")
        for body in (start, end):
            body.pop("sync_id")
        got = deliver(http, end)
        assert got["status"] == "recorded" and got["sync_id_derived"] is True
        assert deliver(http, end)["status"] == "duplicate"  # the same id again
        deliver(http, start)
        rows = syncs(http)
        assert {r["sync_id_derived"] for r in rows} == {True}
        assert rows[0]["sync_id"].startswith("~") and rows[0]["status"] == "FAILURE"
        d = decision(http, iso(at(3)) or "")
        assert d["decision"] == "fail" and d["sync"]["sync_id_derived"] is True

    def test_an_end_without_id_closes_the_start_without_id(self, http: FlaskClient) -> None:
        """The start and the end of a sync that carried no id get different derived ids;
        the end still ends that start (nothing left running) and takes its time."""
        start = payload("sync_start", created=at(3, 1))
        end = payload(created=at(3, 2))
        for body in (start, end):
            body.pop("sync_id")
        deliver(http, start)
        assert [r["status"] for r in syncs(http)] == ["STALE"]  # the test's clock is later
        deliver(http, end)
        [row] = syncs(http)
        assert (row["status"], row["started_at"]) == ("SUCCESSFUL", iso(at(3, 1)))
        d = decision(http, iso(at(3)) or "", criterion="started_after")
        assert d["decision"] == "success"


class TestWhatFivetranSays:
    def test_reason_task_type_and_rescheduled_at_are_shown(self, http: FlaskClient) -> None:
        deliver(
            http,
            payload(
                sync_id="f1",
                created=at(3, 1),
                status="FAILURE_WITH_TASK",
                reason="Missing permissions",
                taskType="reconnect",
            ),
        )
        deliver(
            http,
            payload(
                sync_id="r1",
                created=at(3, 2),
                status="RESCHEDULED",
                reason="Rescheduled: API quota",
                rescheduledAt="2026-01-03T05:00:00.000Z",
            ),
        )
        rows = {r["sync_id"]: r for r in syncs(http)}
        assert (rows["f1"]["reason"], rows["f1"]["task_type"]) == (
            "Missing permissions",
            "reconnect",
        )
        assert rows["r1"]["rescheduled_at"] == "2026-01-03T05:00:00.000Z"
        d = decision(http, "2026-01-03T00:30:00Z", propagate_failures_forward="false")
        assert d["decision"] == "fail"  # a failure after the target stays a failure
        d = decision(http, "2026-01-03T01:30:00Z")
        assert d["decision"] == "wait" and d["recheck_at"] == "2026-01-03T05:00:00.000Z"
        assert "rescheduledAt" in d["reason"] and "2026-01-03T05:00:00.000Z" in d["reason"]


def dropped_count(http: FlaskClient, name: str) -> float:
    return sample(http, f'fivetran_events_webhook_dropped_fields_total{{field="{name}"}}')


class TestOddOptionalFields:
    """An optional field of a shape nobody documents never refuses a known event: a
    refused delivery is retried for 24 hours and then disables the webhook."""

    @pytest.mark.parametrize(
        ("body", "dropped"),
        [
            (payload("resync_table", created=at(3), tables={"public": ["orders"]}), "data.tables"),
            (payload("resync_table", created=at(3), tables=["orders", "\ud800"]), "data.tables"),
            ({**payload("edit_connector", created=at(3)), "data": ["name", "schedule"]}, "data"),
            ({**payload("pause_connector", created=at(3)), "data": "paused by x"}, "data"),
            (
                {**payload("resync_connector", created=at(3)), "data": {"status": {"code": 1}}},
                "data.status",
            ),
            ({**payload("sync_start", created=at(3)), "data": {"status": ""}}, "data.status"),
            (payload(created=at(3), reason="\ud800", taskType=None), "data.reason"),
            (payload(created=at(3), status="RESCHEDULED", rescheduledAt=5), "data.rescheduledAt"),
            ({**payload(created=at(3)), "connector_name": {"n": "pg"}}, "connector_name"),
        ],
    )
    def test_taken_without_the_field_and_counted(
        self, http: FlaskClient, client: redis.Redis, body: dict[str, Any], dropped: str
    ) -> None:
        before = dropped_count(http, dropped)
        got = deliver(http, body)
        assert got["status"] == "recorded" and got["dropped_fields"] == [dropped], got
        assert dropped_count(http, dropped) == before + 1
        assert deliver(http, body)["status"] == "duplicate"  # and taken once

    def test_the_rest_of_the_delivery_is_kept(self, http: FlaskClient, client: redis.Redis) -> None:
        deliver(http, {**payload("pause_connector", created=at(3)), "data": [1]})
        assert connector(http)["lifecycle"]["state"] == "paused"
        deliver(http, payload("resync_table", created=at(4), tables={"public": ["orders"]}))
        assert client.zcard(f"test:h:{CID}:resyncs") == 1
        got = deliver(
            http,
            payload(sync_id="f1", created=at(5), status="FAILED", reason=[1], taskType="\ud800"),
        )
        assert got["dropped_fields"] == ["data.taskType"]
        assert [(r["status"], r["reason"], r["task_type"]) for r in syncs(http)] == [
            ("FAILED", "[1]", None)
        ]

    @pytest.mark.parametrize("status", [None, "", {"s": 1}, "\ud800", "x" * 65])
    def test_a_sync_ends_status_still_refuses(self, http: FlaskClient, status: Any) -> None:
        """The history cannot record an end without its outcome: 400 naming it."""
        r = post_signed(http, payload(created=at(3), status=status))
        assert r.status_code == 400 and answer(r)["field"] == "data.status", r.json


class TestLifecycle:
    def test_paused_deleted_and_broken_connectors_are_shown(self, http: FlaskClient) -> None:
        deliver(http, payload("sync_end", "a", created=at(2), sync_id="s"))
        deliver(http, payload("pause_connection", "a", created=at(3)))
        deliver(http, payload("delete_connector", "b", created=at(4)))
        deliver(http, payload("connection_failure", "c", created=at(5), reason="auth failed"))
        deliver(http, payload("create_connector", "d", created=at(5)))
        life = {cid: connector(http, cid)["lifecycle"] for cid in "abcd"}
        assert (life["a"]["state"], life["a"]["state_at"]) == ("paused", iso(at(3)))
        assert life["a"]["state_event"] == "pause_connector"
        assert life["b"]["state"] == "deleted"
        assert (life["c"]["setup"], life["c"]["setup_reason"]) == ("broken", "auth failed")
        assert (life["d"]["state"], life["d"]["setup"]) == ("active", None)
        deliver(http, payload("connection_successful", "c", created=at(6)))
        assert connector(http, "c")["lifecycle"]["setup_reason"] is None

    def test_out_of_order_lifecycle_lands_by_its_own_time(self, http: FlaskClient) -> None:
        """A resume older than the newest sync but newer than the pause still wins; a
        pause that arrives late, older than the resume, changes nothing."""
        deliver(http, payload("pause_connector", created=at(3)))
        deliver(http, payload(sync_id="s9", created=at(9)))
        deliver(http, payload("resume_connector", created=at(5)))
        assert connector(http)["lifecycle"]["state"] == "active"
        deliver(http, payload("pause_connector", created=at(4)))
        assert connector(http)["lifecycle"]["state"] == "active"
        assert connector(http)["lifecycle"]["state_at"] == iso(at(5))

    def test_a_paused_connector_fails_the_decision_unless_told_to_wait(
        self, http: FlaskClient
    ) -> None:
        deliver(http, payload(sync_id="s1", created=at(2)))
        deliver(http, payload("pause_connector", created=at(3)))
        assert decision(http, iso(at(2)) or "")["decision"] == "success"
        d = decision(http, iso(at(4)) or "")
        assert d["decision"] == "fail" and "paused at 2026-01-03T00:00:00.000Z" in d["reason"]
        assert decision(http, iso(at(4)) or "", wait_when_paused="true")["decision"] == "wait"
        # A sync that starts after the pause: the connector is back, and the answer waits.
        deliver(http, payload("sync_start", sync_id="s2", created=at(5)))
        assert connector(http)["lifecycle"]["state"] == "active"
        assert decision(http, iso(at(6)) or "")["decision"] == "wait"

    def test_unsigned_lifecycle_event_changes_nothing(
        self, http: FlaskClient, client: redis.Redis
    ) -> None:
        resp = post_signed(http, payload("pause_connector", created=at(3)), secret="wrong")
        assert resp.status_code == 401 and client.keys("*") == []

    def test_a_broken_connector_fails_the_decision_unless_told_to_wait(
        self, http: FlaskClient
    ) -> None:
        """The read API: a connection_failure fails a target nothing counts for, naming
        it; ?wait_when_broken=true waits; a connection_successful ends it."""
        deliver(http, payload(sync_id="s1", created=at(2)))
        deliver(http, payload("connection_failure", created=at(3), reason="auth failed"))
        assert decision(http, iso(at(2)) or "")["decision"] == "success"
        d = decision(http, iso(at(4)) or "")
        assert d["decision"] == "fail" and "connection_failure (auth failed)" in d["reason"]
        assert iso(at(3)) in d["reason"]
        assert decision(http, iso(at(4)) or "", wait_when_broken="true")["decision"] == "wait"
        deliver(http, payload("connection_successful", created=at(3, 1)))
        assert decision(http, iso(at(4)) or "")["decision"] == "wait"
