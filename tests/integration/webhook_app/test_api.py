"""The read API: tokens, parameters, listings and the seed calendars end to end."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fivetran_events import Settings
from fivetran_events.timeutil import iso
from testkit.calendars import CALENDARS, SCENARIO_A, SCENARIO_B
from testkit.support import TOKEN, answer, at, deliver, payload
from webhook_app import create_app

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def load_scenario(http: FlaskClient, rows: list[tuple[str, datetime, str]]) -> None:
    for sync_id, ended, status in rows:
        failure_reason: dict[str, Any] = (
            {"reason": "quota exceeded"} if status != "SUCCESSFUL" else {}
        )
        deliver(http, payload("sync_start", sync_id=sync_id, created=ended.replace(hour=5)))
        deliver(
            http,
            payload(
                sync_id=sync_id,
                created=ended,
                status=status,
                **failure_reason,
            ),
        )


class TestAuth:
    def test_401_without_token(self, http: FlaskClient) -> None:
        r = http.get("/api/connectors")
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"

    @pytest.mark.parametrize("given", ["nope", TOKEN + "x", TOKEN[:-1], "é" * 8])
    def test_401_invalid_token(self, http: FlaskClient, given: str) -> None:
        """A wrong token is 401 with RFC 6750's error="invalid_token", not 403."""
        r = http.get("/api/connectors", headers={"Authorization": f"Bearer {given}"})
        assert r.status_code == 401 and r.is_json
        assert r.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'

    def test_403_when_no_tokens_configured(self, settings: Settings) -> None:
        app = create_app(settings.model_copy(update={"api_tokens": []}))
        r = app.test_client().get("/api/connectors", headers=AUTH)
        assert r.status_code == 403 and "FIVETRAN_EVENTS_API_TOKENS" in (r.json or {})["error"]


class TestListings:
    def test_connectors(self, http: FlaskClient) -> None:
        """Known connectors show last success, last failure and the running sync."""
        load_scenario(http, SCENARIO_A)
        deliver(http, payload("sync_start", sync_id="now", created=at(15, 1)))
        [c] = answer(http.get("/api/connectors", headers=AUTH))["connectors"]
        assert c["connector_id"] == "assimilate_seem" and c["connector_name"] == "ftar_pg"
        assert c["last_success"]["sync_id"] == "a-ok"
        assert c["last_failure"]["reason"] == "quota exceeded"
        # The test's clock is the real one, months after January: the start is stale.
        assert c["running"] is None

    def test_syncs_newest_first_with_window(self, http: FlaskClient) -> None:
        load_scenario(http, SCENARIO_B)
        rows = answer(http.get("/api/connectors/assimilate_seem/syncs", headers=AUTH))["syncs"]
        assert [r["sync_id"] for r in rows] == ["b-ok", "b-fail"]
        assert {k: v for k, v in rows[0].items() if k != "forwarding"} == {
            "sync_id": "b-ok",
            "sync_id_derived": False,
            "status": "SUCCESSFUL",
            "started_at": iso(at(10, 5)),
            "ended_at": iso(at(10, 6)),
            "reason": None,
            "task_type": None,
            "rescheduled_at": None,
        }
        rows = answer(
            http.get("/api/connectors/assimilate_seem/syncs?until=2026-01-05&limit=5", headers=AUTH)
        )["syncs"]
        assert [r["sync_id"] for r in rows] == ["b-fail"]

    @pytest.mark.parametrize(
        ("query", "field"),
        [
            ("limit=0", "limit"),
            ("limit=x", "limit"),
            ("since=yesterday", "since"),
            ("since=2026-02-01&until=2026-01-01", "since"),
        ],
    )
    def test_bad_parameters(self, http: FlaskClient, query: str, field: str) -> None:
        deliver(http, payload(created=at(3)))
        r = http.get(f"/api/connectors/assimilate_seem/syncs?{query}", headers=AUTH)
        assert r.status_code == 400 and answer(r)["field"] == field

    def test_unknown_connector_404(self, http: FlaskClient) -> None:
        r = http.get("/api/connectors/nobody/syncs", headers=AUTH)
        assert r.status_code == 404 and "nobody" in answer(r)["error"]

    @pytest.mark.parametrize("view", ["syncs", "decision?target=2026-01-05"])
    @pytest.mark.parametrize("connector", ["abc%0A", "assimilate_seem%0A"])
    def test_a_trailing_newline_is_not_an_id(
        self, http: FlaskClient, connector: str, view: str
    ) -> None:
        """'abc\\n' is a malformed id (400), not an unrecorded one (404), even when the id
        before the newline is recorded."""
        deliver(http, payload(created=at(3)))
        r = http.get(f"/api/connectors/{connector}/{view}", headers=AUTH)
        assert r.status_code == 400 and answer(r)["field"] == "connector_id", r.json


class TestDecision:
    @pytest.mark.parametrize(("scenario", "propagate"), list(CALENDARS))
    def test_seed_calendar_through_webhook_and_api(
        self,
        http: FlaskClient,
        scenario: str,
        propagate: bool,
    ) -> None:
        """History written by signed webhooks; the API's decisions give the seed calendar."""
        load_scenario(http, SCENARIO_A if scenario == "A" else SCENARIO_B)
        got = {}
        for day in range(1, 16):
            r = http.get(
                "/api/connectors/assimilate_seem/decision",
                headers=AUTH,
                query_string={
                    "target": f"2026-01-{day:02d}T00:00:00",
                    "propagate_failures_forward": str(propagate).lower(),
                },
            )
            assert r.status_code == 200
            assert answer(r)["target"] == iso(at(day))
            got[day] = answer(r)["decision"]
        assert got == CALENDARS[(scenario, propagate)]

    def test_fail_body_names_the_sync(self, http: FlaskClient) -> None:
        load_scenario(http, SCENARIO_A)
        r = answer(
            http.get(
                "/api/connectors/assimilate_seem/decision?target=2026-01-11T00:00:00Z",
                headers=AUTH,
            )
        )
        assert r["decision"] == "fail" and r["sync"]["sync_id"] == "a-fail"
        assert "quota exceeded" in r["reason"]

    def test_started_after(self, http: FlaskClient) -> None:
        """A sync that started before the target does not count under started_after."""
        load_scenario(http, SCENARIO_B)  # b-ok started Jan 10 05:00, ended 06:00
        q = "target=2026-01-10T05:30:00Z"
        base = "/api/connectors/assimilate_seem/decision?"
        assert answer(http.get(base + q, headers=AUTH))["decision"] == "success"
        assert (
            answer(http.get(base + q + "&criterion=started_after", headers=AUTH))["decision"]
            == "wait"
        )

    @pytest.mark.parametrize(
        ("query", "field"),
        [
            ("", "target"),
            ("target=soon", "target"),
            ("target=9999-12-31T23:59:59-14:00", "target"),
            ("target=2026-01-01&propagate_failures_forward=maybe", "propagate_failures_forward"),
            ("target=2026-01-01&always_wait_when_syncing=2", "always_wait_when_syncing"),
            ("target=2026-01-01&criterion=whenever", "criterion"),
        ],
    )
    def test_bad_parameters(self, http: FlaskClient, query: str, field: str) -> None:
        deliver(http, payload(created=at(3)))
        r = http.get(f"/api/connectors/assimilate_seem/decision?{query}", headers=AUTH)
        assert r.status_code == 400 and answer(r)["field"] == field, r.json


class TestHostileQueries:
    @settings(
        max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        connector=st.text(max_size=40).filter(
            lambda s: "/" not in s and "?" not in s and "#" not in s
        ),
        params=st.dictionaries(
            st.sampled_from(
                [
                    "target",
                    "since",
                    "until",
                    "limit",
                    "criterion",
                    "propagate_failures_forward",
                    "always_wait_when_syncing",
                ]
            ),
            st.text(max_size=40) | st.datetimes().map(lambda d: d.isoformat()),
            max_size=5,
        ),
        view=st.sampled_from(["syncs", "decision"]),
    )
    def test_never_500(
        self,
        http: FlaskClient,
        connector: str,
        params: dict[str, str],
        view: str,
    ) -> None:
        """Random connector ids and query parameters get 200, 400 or 404, never 500."""
        deliver(http, payload(sync_id="s1", created=at(3)))  # a duplicate after the first
        cid = connector or "assimilate_seem"
        r = http.get(
            f"/api/connectors/{quote(cid, safe='')}/{view}", headers=AUTH, query_string=params
        )
        assert r.status_code in (200, 400, 404), (r.status_code, r.data)
        assert r.is_json
