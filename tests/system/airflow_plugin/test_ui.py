"""The "Fivetran syncs" view as Airflow's API server serves it: auth, input, bounds.

Every request goes to the session's real Airflow 3 (tests/airflow_harness.py), which
loads the plugin from its entry point and reads the suite's Redis through the plugin's
hook; the history is written through the webhook (signed POSTs) or the HistoryWriter.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis
import requests
from flask.testing import FlaskClient

from airflow_plugin.ui import connector_view_url
from fivetran_events import HistoryWriter, parse_event
from fivetran_events.freshness import Schedule
from fivetran_events.history.writer import record_schedules
from testkit.airflow_harness import ROLE_USERS, AirflowServer
from testkit.calendars import SCENARIO_A, SCENARIO_B
from testkit.support import at, deliver, encode, payload

from .dagtest import PAGE, seed, sync


def view(airflow3: Any, path: str, token: str | None = None, **kw: Any) -> requests.Response:
    headers = {"Authorization": f"Bearer {token or airflow3.token()}"}
    return requests.get(airflow3.url + path, headers=headers, timeout=30, **kw)


def decisions(html: str) -> dict[int, str]:
    """Day of January -> the decision the calendar shows for that day's midnight."""
    found = re.findall(r'data-target="2026-01-(\d\d)T00:00:00.000Z" data-decision="(\w+)"', html)
    return {int(day): decision for day, decision in found}


class TestAuth:
    def test_without_a_session_it_is_refused(
        self, airflow3: AirflowServer, http: FlaskClient
    ) -> None:
        """No cookie, no bearer: Airflow's own auth answers 401 before the view reads."""
        seed(http, "ui_a", SCENARIO_A)
        for path in ("/fivetran-events/", PAGE.format("ui_a")):
            resp = requests.get(airflow3.url + path, timeout=30)
            assert resp.status_code == 401, (path, resp.status_code, resp.text[:200])
            assert "ui_a" not in resp.text

    def test_a_forged_or_expired_session_is_refused(
        self, airflow3: AirflowServer, http: FlaskClient
    ) -> None:
        """A cookie that is not Airflow's JWT is 403; one Airflow issued but expired, 401."""
        seed(http, "ui_a", SCENARIO_A)
        forged = requests.get(
            airflow3.url + "/fivetran-events/", cookies={"_token": "not-a-jwt"}, timeout=30
        )
        assert forged.status_code == 403, forged.text[:200]
        expired = requests.get(
            airflow3.url + "/fivetran-events/",
            cookies={"_token": airflow3.expired_token()},
            timeout=30,
        )
        assert expired.status_code == 401, expired.text[:200]

    def test_a_logged_in_user_sees_the_list(
        self, airflow3: AirflowServer, http: FlaskClient
    ) -> None:
        """The session cookie Airflow's UI holds (``_token``) opens the view."""
        seed(http, "ui_a", SCENARIO_A)
        seed(http, "ui_b", SCENARIO_B)
        resp = requests.get(
            airflow3.url + "/fivetran-events/", cookies={"_token": airflow3.token()}, timeout=30
        )
        assert resp.status_code == 200, resp.text[:300]
        assert 'data-connector="ui_a"' in resp.text and 'data-connector="ui_b"' in resp.text

    def test_the_least_role_is_enough(self, airflow3: AirflowServer, http: FlaskClient) -> None:
        """A viewer (the simple auth manager's least role) may look: the view only reads."""
        seed(http, "ui_a", SCENARIO_A)
        name = ROLE_USERS["viewer"]
        tok = requests.post(
            f"{airflow3.url}/auth/token",
            json={"username": name, "password": airflow3.role_passwords[name]},
            timeout=30,
        ).json()["access_token"]
        resp = view(airflow3, "/fivetran-events/", tok)
        assert resp.status_code == 200 and 'data-connector="ui_a"' in resp.text, resp.text[:300]

    def test_airflow_lists_the_app_and_the_nav_entry(self, airflow3: AirflowServer) -> None:
        """GET /api/v2/plugins shows the mounted app and the "Fivetran syncs" view."""
        plugins = airflow3.get("/api/v2/plugins").json()["plugins"]
        ours = next(p for p in plugins if p["name"] == "fivetran_events")
        assert [(a["url_prefix"], a["name"]) for a in ours["fastapi_apps"]] == [
            ("/fivetran-events", "Fivetran syncs")
        ]
        assert [(v["name"], v["href"]) for v in ours["external_views"]] == [
            ("Fivetran syncs", "/fivetran-events/")
        ]


class TestPages:
    def test_the_list_shows_last_success_failure_running_and_forwarding(
        self, airflow3: AirflowServer, http: FlaskClient
    ) -> None:
        """Each connector's newest success and failure, a running sync, its deliveries."""
        seed(http, "ui_a", SCENARIO_A)
        now = payload("sync_start", "ui_run", sync_id="running-now")
        resp = http.post("/webhooks/fivetran", data=encode(now), headers=_signed(now))
        assert resp.status_code == 200
        html = view(airflow3, "/fivetran-events/").text
        row_a = _row(html, "ui_a")
        assert "2026-01-10T06:00:00.000Z" in _cell(row_a, "last-success")
        assert "2026-01-12T06:00:00.000Z" in _cell(row_a, "last-failure")
        assert "no" in _cell(row_a, "running")
        # The web app (forwarding on in the tests) created a delivery for a-ok; no worker
        # runs, so it is still pending.
        assert 'data-state="pending"' in row_a
        row_run = _row(html, "ui_run")
        assert 'title="running-now"' in _cell(row_run, "running")
        assert 'data-state=""' in row_run

    def test_the_calendar_is_the_seed_table(
        self, airflow3: AirflowServer, http: FlaskClient
    ) -> None:
        """Histories A and B, both propagate values: the manual's table, day by day."""
        from testkit.calendars import CALENDARS

        seed(http, "ui_a", SCENARIO_A)
        seed(http, "ui_b", SCENARIO_B)
        for (scenario, propagate), expected in CALENDARS.items():
            path = PAGE.format(f"ui_{scenario.lower()}")
            html = view(airflow3, f"{path}&propagate_failures_forward={propagate}").text
            assert decisions(html) == expected, (scenario, propagate)

    def test_a_link_opens_the_decision_for_its_target(
        self, airflow3: AirflowServer, http: FlaskClient
    ) -> None:
        """connector_view_url's URL shows the sensor's decision for that target."""
        seed(http, "ui_a", SCENARIO_A)
        url = connector_view_url("ui_a", at(13), propagate_failures_forward=False)
        html = view(airflow3, url).text
        assert 'id="decision" data-decision="wait"' in html
        url = connector_view_url("ui_a", at(13), propagate_failures_forward=True)
        assert 'id="decision" data-decision="fail"' in view(airflow3, url).text

    def test_the_timeline_draws_each_sync_in_its_color(
        self, airflow3: AirflowServer, http: FlaskClient
    ) -> None:
        """Success, failure and RESCHEDULED each get their class; the range bounds them."""
        seed(http, "ui_a", SCENARIO_A)
        sync(http, "ui_a", at(5, 6), "RESCHEDULED", sync_id="a-later", started=at(5, 5))
        sync(http, "ui_a", at(20, 6), sync_id="a-outside", started=at(20, 5))
        html = view(airflow3, PAGE.format("ui_a")).text
        drawn = dict(re.findall(r'class="sync sync-(\w+)" data-sync-id="([\w-]+)"', html))
        assert {v: k for k, v in drawn.items()} == {
            "a-ok": "success",
            "a-fail": "failure",
            "a-later": "rescheduled",
        }

    def test_the_syncs_table_shows_the_periods_each_success_completed(
        self, airflow3: AirflowServer, http: FlaskClient
    ) -> None:
        """With ?partitions=day each success lists the days it completed (the first only
        the day before it; a failure none), by the page's criterion; a bad grain is 400."""
        seed(http, "ui_p", SCENARIO_A)  # a-ok Jan 10 06:20 (started 06:00), a-fail Jan 12
        sync(http, "ui_p", at(14, 6), sync_id="p-next", started=at(13, 23, 50))
        page = PAGE.format("ui_p")

        def days(html: str) -> dict[str, str]:
            rows = re.findall(r'<tr data-sync-id="([^"]+)"(.*?)</tr>', html, re.S)
            return {
                sid: (re.findall(r'data-partitions="([^"]*)"', row) or [""])[0] for sid, row in rows
            }

        ended = days(view(airflow3, page + "&partitions=day").text)
        assert ended == {
            "p-next": " ".join(f"2026-01-{d}T00:00:00" for d in (10, 11, 12, 13)),
            "a-fail": "",
            "a-ok": "2026-01-09T00:00:00",
        }
        started = days(view(airflow3, page + "&partitions=day&criterion=started_after").text)
        assert started["p-next"] == " ".join(f"2026-01-{d}T00:00:00" for d in (10, 11, 12))
        assert "partitions" not in view(airflow3, page).text.split("<table")[-1]
        assert view(airflow3, page + "&partitions=week").status_code == 400


class TestFivetranToday:
    """Lifecycle events, Fivetran's words on a sync, derived ids and wait_when_paused."""

    def test_the_list_shows_paused_deleted_and_broken_connectors(
        self, airflow3: AirflowServer, http: FlaskClient
    ) -> None:
        """Each stopped or broken connector gets its badge with the time it happened."""
        for cid in ("ui_paused", "ui_gone", "ui_broken", "ui_fine"):
            sync(http, cid, at(10, 6), sync_id=f"{cid}-ok", started=at(10, 5))
        deliver(http, payload("pause_connector", "ui_paused", at(11, 8, 30)))
        deliver(http, payload("delete_connector", "ui_gone", at(12, 9)))
        deliver(
            http,
            payload("connection_failure", "ui_broken", at(12, 7), reason="password <expired>"),
        )
        html = view(airflow3, "/fivetran-events/").text
        paused = _cell(_row(html, "ui_paused"), "lifecycle")
        assert 'class="pill paused"' in paused and "since 2026-01-11T08:30:00.000Z" in paused
        gone = _cell(_row(html, "ui_gone"), "lifecycle")
        assert 'class="pill deleted"' in gone and "since 2026-01-12T09:00:00.000Z" in gone
        broken = _cell(_row(html, "ui_broken"), "lifecycle")
        assert 'class="pill broken"' in broken and "since 2026-01-12T07:00:00.000Z" in broken
        assert 'title="password &lt;expired&gt;"' in broken  # Fivetran's reason, escaped
        assert "paused" not in broken and "deleted" not in broken
        fine = _cell(_row(html, "ui_fine"), "lifecycle")
        assert "active" in fine and "pill" not in fine
        assert 'data-lifecycle="paused"' in _row(html, "ui_paused")
        assert 'data-setup="broken"' in _row(html, "ui_broken")

    def test_the_list_marks_overdue_connectors_and_says_by_how_much(
        self, airflow3: AirflowServer, http: FlaskClient, client: redis.Redis
    ) -> None:
        """Hourly and last synced long ago: overdue, by its hours; manual: no schedule."""
        for cid in ("ui_hourly", "ui_manual"):
            sync(http, cid, at(10, 6), sync_id=f"{cid}-ok", started=at(10, 5))
        record_schedules(
            client,
            "test:",
            {
                "ui_hourly": Schedule(sync_frequency=60, schedule_type="auto"),
                "ui_manual": Schedule(sync_frequency=60, schedule_type="manual"),
            },
        )
        html = view(airflow3, "/fivetran-events/").text
        late = _cell(_row(html, "ui_hourly"), "overdue")
        assert 'class="pill fail"' in late and re.search(r"\d+h\d\dm late", late), late
        assert "no schedule" in _cell(_row(html, "ui_manual"), "overdue")

    def test_a_connectors_page_shows_reason_task_type_rescheduled_at_and_derived_ids(
        self, airflow3: AirflowServer, http: FlaskClient
    ) -> None:
        """The syncs table names Fivetran's words on each sync and marks a derived id."""
        sync(http, "ui_later", at(9, 6), sync_id="l-ok", started=at(9, 5))
        sync(http, "ui_later", at(9, 12), "CANCELED", sync_id="l-cancel")
        body = payload(
            "sync_end",
            "ui_later",
            at(10, 6),
            status="RESCHEDULED",
            reason="quota exceeded",
            taskType="historical_sync",
            rescheduledAt="2026-01-10T07:00:00.000Z",
        )
        del body["sync_id"]  # Fivetran sent none: one is derived
        deliver(http, body)
        html = view(airflow3, PAGE.format("ui_later") + "&target=2026-01-10T00:00:00Z").text
        rows = dict(
            re.findall(
                r'<tr data-sync-id="([^"]+)" data-status="RESCHEDULED">(.*?)</tr>', html, re.S
            )
        )
        assert len(rows) == 1, html
        ((sync_id, row),) = rows.items()
        assert sync_id.startswith("~") and 'class="derived"' in _cell(row, "sync-id")
        assert _cell(row, "task-type") == "historical_sync"
        assert _cell(row, "rescheduled-at") == "2026-01-10T07:00:00.000Z"
        assert _cell(row, "reason") == "quota exceeded"
        canceled = re.search(
            r'<tr data-sync-id="l-cancel" data-status="CANCELED">(.*?)</tr>', html, re.S
        )
        assert canceled and 'class="derived"' not in canceled.group(1)
        assert 'class="pill other"' in canceled.group(1)  # neither success nor failure
        drawn = dict(re.findall(r'class="sync sync-(\w+)" data-sync-id="([\w~-]+)"', html))
        assert {v: k for k, v in drawn.items()} == {
            "l-ok": "success",
            "l-cancel": "other",
            sync_id: "rescheduled",
        }
        # The latest end is RESCHEDULED: the chosen day waits until rescheduledAt.
        assert 'data-decision="wait" data-recheck-at="2026-01-10T07:00:00.000Z"' in html

    def test_wait_when_paused_turns_a_paused_connectors_fail_into_wait(
        self, airflow3: AirflowServer, http: FlaskClient
    ) -> None:
        """Paused on Jan 11: the later days fail, or wait with wait_when_paused; the
        legend says why."""
        sync(http, "ui_paused", at(10, 6), sync_id="p-ok", started=at(10, 5))
        deliver(http, payload("pause_connector", "ui_paused", at(11, 8, 30)))
        path = PAGE.format("ui_paused")
        plain = view(airflow3, path).text
        assert {d: plain_d for d, plain_d in decisions(plain).items() if d > 10} == dict.fromkeys(
            range(11, 16), "fail"
        )
        waiting = view(airflow3, f"{path}&wait_when_paused=true").text
        assert decisions(waiting) == {**decisions(plain), **dict.fromkeys(range(11, 16), "wait")}
        assert '<select name="wait_when_paused">' in waiting
        assert "<option selected>true</option>" in waiting.split('name="wait_when_paused"')[1]
        href = re.search(r'href="(\?[^"]*target=2026-01-12[^"]*)"', waiting)
        assert href and "wait_when_paused=true" in href.group(1)  # a day keeps the flags
        rules = re.search(r'<ul class="rules" id="decision-rules">(.*?)</ul>', plain, re.S)
        assert rules, plain
        text = " ".join(re.sub(r"<[^>]+>", "", rules.group(1)).split())
        assert "paused or deleted connector makes the decision fail" in text
        assert "unless wait_when_paused" in text
        assert "RESCHEDULED latest end makes it wait until Fivetran's rescheduledAt" in text
        assert "CANCELED and unknown statuses are neither success nor failure" in text


def _signed(body: dict[str, Any]) -> dict[str, str]:
    from testkit.support import signed

    return signed(body)[1]


def _row(html: str, connector_id: str) -> str:
    match = re.search(rf'<tr data-connector="{connector_id}">(.*?)</tr>', html, re.S)
    assert match, f"no row for {connector_id}"
    return match.group(1)


def _cell(row: str, cls: str) -> str:
    match = re.search(rf'<td class="{cls}"[^>]*>(.*?)</td>', row, re.S)
    assert match, f"no {cls} cell"
    return match.group(1)


class TestBadInput:
    @pytest.mark.parametrize(
        ("query", "names"),
        [
            ("target=yesterday", "target"),
            ("propagate_failures_forward=maybe", "propagate_failures_forward"),
            ("always_wait_when_syncing=2", "always_wait_when_syncing"),
            ("wait_when_paused=maybe", "wait_when_paused"),
            ("criterion=started_before", "criterion"),
            ("start=2026-01-15&end=2026-01-01", "before start"),
            ("start=2025-01-01&end=2026-03-01", "400 days"),
            ("start=2026-13-01", "start"),
            ("limit=0", "limit"),
            ("limit=ten", "limit"),
            # a default range counted from a day near either end of the calendar
            ("target=9999-12-31T00:00:00Z", "target: "),
            ("target=0001-01-01T00:00:00Z", "target: "),
            ("end=0001-01-05", "end: "),
            ("start=9999-12-20", "start: "),
        ],
    )
    def test_a_bad_parameter_is_a_400_naming_it(
        self,
        airflow3: AirflowServer,
        http: FlaskClient,
        client: redis.Redis,
        query: str,
        names: Any,
    ) -> None:
        """Never a 500, never a guess: the page says what to fix, and nothing is written."""
        seed(http, "ui_a", SCENARIO_A)
        before = sorted(client.keys("*"))
        resp = view(airflow3, f"/fivetran-events/connectors/ui_a?{query}")
        assert resp.status_code == 400, (query, resp.status_code, resp.text[:300])
        assert names in resp.text
        assert sorted(client.keys("*")) == before

    @pytest.mark.parametrize(
        "query",
        [
            "start=9999-12-30&end=9999-12-31",
            "start=0001-01-01&end=0001-01-02",
            "target=9999-12-31T23:59:59Z&start=9999-12-31&end=9999-12-31",
        ],
    )
    def test_a_range_at_either_end_of_the_calendar_is_shown(
        self, airflow3: AirflowServer, http: FlaskClient, query: str
    ) -> None:
        """Days up to 9999-12-31 and from 0001-01-01 are a calendar like any other."""
        seed(http, "ui_a", SCENARIO_A)
        resp = view(airflow3, f"/fivetran-events/connectors/ui_a?{query}")
        assert resp.status_code == 200, (query, resp.status_code, resp.text[:300])

    @pytest.mark.parametrize("connector", ["nobody", "bad%3Aid", "x" * 200])
    def test_an_unknown_connector_is_a_404(
        self, airflow3: AirflowServer, http: FlaskClient, connector: str
    ) -> None:
        seed(http, "ui_a", SCENARIO_A)
        resp = view(airflow3, f"/fivetran-events/connectors/{connector}")
        assert resp.status_code == 404, resp.text[:300]
        assert "has been recorded" in resp.text

    def test_a_bad_list_page_is_a_400(self, airflow3: AirflowServer) -> None:
        for query in ("offset=-1", "limit=100000", "limit=x"):
            resp = view(airflow3, f"/fivetran-events/?{query}")
            assert resp.status_code == 400, (query, resp.text[:300])


def _calls(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")


class TestBounded:
    def test_a_long_history_costs_the_page_no_more_reads(
        self, airflow3: AirflowServer, http: FlaskClient, client: redis.Redis, writer: HistoryWriter
    ) -> None:
        """2,000 older syncs: the same Redis commands and about the same bytes as none."""
        seed(http, "ui_small", SCENARIO_A)
        seed(http, "ui_big", SCENARIO_A)
        start = at(1) - 2000 * (at(1, 1) - at(1))
        for i in range(2000):
            ended = start + i * (at(1, 1) - at(1))
            writer.record(parse_event(encode(payload("sync_end", "ui_big", ended, f"old-{i}"))))
        cost = {}
        for name in ("ui_small", "ui_big"):
            view(airflow3, PAGE.format(name))  # the first request builds the app and reader
            calls, out = _calls(client), client.info("stats")["total_net_output_bytes"]
            html = view(airflow3, PAGE.format(name)).text
            cost[name] = (
                _calls(client) - calls,
                client.info("stats")["total_net_output_bytes"] - out,
            )
            assert decisions(html)[13] == "fail"
        assert cost["ui_big"][0] == cost["ui_small"][0], cost
        assert cost["ui_big"][1] < 1.2 * cost["ui_small"][1] + 2000, cost

    def test_the_timeline_shows_at_most_limit_syncs(
        self, airflow3: AirflowServer, http: FlaskClient, writer: HistoryWriter
    ) -> None:
        """More syncs in the range than the limit: the newest ones, and the page says so."""
        seed(http, "ui_many", SCENARIO_A)
        for hour in range(30):
            writer.record(
                parse_event(
                    encode(payload("sync_end", "ui_many", at(3, hour % 24, hour), f"m{hour}"))
                )
            )
        html = view(airflow3, PAGE.format("ui_many") + "&limit=10").text
        assert html.count('class="sync sync-') == 10
        assert "the newest 10 shown" in html
        assert 'data-sync-id="a-fail"' in html  # the newest is kept
