"""The CLI speaks Fivetran as it is today: lifecycle, reasons, derived ids, rescheduledAt.

The history is real: signed deliveries through the app into the suite's Redis (pauses,
deletions and connection failures are webhooks like any other), the commands run
through click's runner as scripts run them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fivetran_events import Settings
from testkit.support import at, deliver, payload
from testkit.worker_process import worker_env
from webhook_app.cli import main

#: The reason Fivetran gave for a connection failure, with an escape sequence in it.
BROKEN_REASON = "password expired\x1b[2J"


def cli(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def success(http: Any, connector_id: str, day: int) -> None:
    sync_id = f"{connector_id}-ok"
    deliver(http, payload("sync_start", connector_id, at(day, 5), sync_id=sync_id))
    deliver(http, payload("sync_end", connector_id, at(day, 6), sync_id=sync_id))


def without_sync_id(body: dict[str, Any]) -> dict[str, Any]:
    """A sync event as Fivetran sometimes sends it: no sync_id (one is derived)."""
    del body["sync_id"]
    return body


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    return worker_env(settings)


@pytest.fixture
def today(http: Any) -> None:
    """A paused, a deleted, a broken connector, and one whose latest end is RESCHEDULED."""
    success(http, "paused_pg", 10)
    deliver(http, payload("pause_connector", "paused_pg", at(11, 8, 30)))
    success(http, "gone_pg", 10)
    deliver(http, payload("delete_connector", "gone_pg", at(12, 9)))
    success(http, "broken_pg", 10)
    deliver(http, payload("connection_failure", "broken_pg", at(12, 7), reason=BROKEN_REASON))
    success(http, "later_pg", 9)
    deliver(http, without_sync_id(payload("sync_start", "later_pg", at(10, 5))))
    deliver(
        http,
        without_sync_id(
            payload(
                "sync_end",
                "later_pg",
                at(10, 6),
                status="RESCHEDULED",
                reason="quota exceeded",
                taskType="historical_sync",
                rescheduledAt="2026-01-10T07:00:00.000Z",
            )
        ),
    )
    deliver(http, payload("sync_end", "later_pg", at(9, 12), sync_id="c-1", status="CANCELED"))


@pytest.mark.usefixtures("today")
class TestConnectorsState:
    def test_the_table_names_paused_deleted_and_broken_connectors(
        self, env: dict[str, str]
    ) -> None:
        """STATE says active, paused/deleted since when, broken since when; --json exactly."""
        out = cli(env, "connectors")
        assert out.exit_code == 0, out.output
        lines = out.stdout.splitlines()
        assert lines[0].split()[:3] == ["CONNECTOR", "NAME", "STATE"]
        col = lines[0].index("STATE")
        states = {line.split()[0]: line[col:].split("  ")[0] for line in lines[1:]}
        assert states == {
            "broken_pg": "broken since 2026-01-12T07:00Z",
            "gone_pg": "deleted since 2026-01-12T09:00Z",
            "later_pg": "active",
            "paused_pg": "paused since 2026-01-11T08:30Z",
        }
        assert "\x1b" not in out.stdout
        body = json.loads(cli(env, "connectors", "--json").stdout)
        life = {c["connector_id"]: c["lifecycle"] for c in body["connectors"]}
        assert life["paused_pg"] == {
            "state": "paused",
            "state_at": "2026-01-11T08:30:00.000Z",
            "state_event": "pause_connector",
            "setup": None,
            "setup_at": None,
            "setup_reason": None,
        }
        assert life["gone_pg"]["state"] == "deleted"
        assert life["broken_pg"] == {
            "state": "active",
            "state_at": None,
            "state_event": None,
            "setup": "broken",
            "setup_at": "2026-01-12T07:00:00.000Z",
            "setup_reason": BROKEN_REASON,
        }


@pytest.mark.usefixtures("today")
class TestHistoryFields:
    def test_the_table_shows_task_type_rescheduled_at_reason_and_derived_ids(
        self, env: dict[str, str]
    ) -> None:
        """Each sync's Fivetran words in their columns, a derived id marked; --json exactly."""
        out = cli(env, "history", "later_pg")
        assert out.exit_code == 0, out.output
        header, *rows = out.stdout.splitlines()
        assert header.split("  ")[0] == "SYNC ID"
        for name in ("TASK TYPE", "RESCHEDULED AT", "REASON"):
            assert name in header
        resched = next(r for r in rows if "RESCHEDULED " in r)
        assert resched.startswith("~") and "(derived)" in resched.split("  ")[0]
        assert "historical_sync" in resched
        assert "2026-01-10T07:00:00.000Z" in resched
        assert resched.rstrip().endswith("quota exceeded")
        canceled = next(r for r in rows if "CANCELED" in r)
        assert canceled.startswith("c-1 ") and "(derived)" not in canceled
        # The reschedule (which ended the start without an id before it), the cancel, the
        # success.
        assert len(rows) == 3
        body = json.loads(cli(env, "history", "later_pg", "--json").stdout)
        resched = next(s for s in body["syncs"] if s["status"] == "RESCHEDULED")
        assert resched["sync_id"].startswith("~")
        assert resched == {
            "sync_id": resched["sync_id"],
            "sync_id_derived": True,
            "status": "RESCHEDULED",
            "started_at": "2026-01-10T05:00:00.000Z",
            "ended_at": "2026-01-10T06:00:00.000Z",
            "reason": "quota exceeded",
            "task_type": "historical_sync",
            "rescheduled_at": "2026-01-10T07:00:00.000Z",
        }
        canceled = next(s for s in body["syncs"] if s["status"] == "CANCELED")
        assert canceled["sync_id_derived"] is False and canceled["rescheduled_at"] is None


@pytest.mark.usefixtures("today")
class TestDecide:
    @pytest.mark.parametrize(
        ("connector", "without", "with_flag"),
        [("paused_pg", "FAIL", "WAIT"), ("gone_pg", "FAIL", "WAIT"), ("broken_pg", "FAIL", "WAIT")],
    )
    def test_a_stopped_connector_fails_unless_wait_when_paused(
        self, env: dict[str, str], connector: str, without: str, with_flag: str
    ) -> None:
        """Paused or deleted: FAIL (1) naming it; --wait-when-paused: WAIT (3). Broken
        (a connection_failure, #31): FAIL naming it; --wait-when-broken: WAIT."""
        codes = {"FAIL": 1, "WAIT": 3}
        keep = "--wait-when-broken" if connector == "broken_pg" else "--wait-when-paused"
        for flags, word in (([], without), ([keep], with_flag)):
            out = cli(env, "decide", connector, "--target", "2026-01-13", *flags)
            assert out.exit_code == codes[word], (flags, out.output)
            assert out.stdout.startswith(f"{word}:"), (flags, out.stdout)
            if word == "FAIL":
                assert connector.split("_")[0].replace("gone", "deleted") in out.stdout

    def test_a_rescheduled_end_prints_when_to_look_again(self, env: dict[str, str]) -> None:
        """WAIT, then a line with Fivetran's rescheduledAt; none for a decision without it."""
        out = cli(env, "decide", "later_pg", "--target", "2026-01-10")
        assert out.exit_code == 3, out.output
        first, *rest = out.stdout.splitlines()
        assert first.startswith("WAIT:") and "RESCHEDULED" in first
        assert rest == ["recheck at: 2026-01-10T07:00:00.000Z"]
        body = json.loads(cli(env, "decide", "later_pg", "--target", "2026-01-10", "--json").stdout)
        assert body["recheck_at"] == "2026-01-10T07:00:00.000Z"
        assert body["sync"]["rescheduled_at"] == "2026-01-10T07:00:00.000Z"
        assert body["sync"]["sync_id_derived"] is True
        out = cli(env, "decide", "paused_pg", "--target", "2026-01-10")
        assert out.exit_code == 0 and out.stdout.count("\n") == 1, out.output
