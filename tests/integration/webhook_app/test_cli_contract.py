"""The CLI's contract with scripts: exit codes, one-line errors, --json, the connectors list
(--help's promises and usage errors, without Redis: tests/unit/webhook_app/test_cli_usage.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fivetran_events import Settings
from testkit.airflow2_standin import Airflow2StandIn
from testkit.cli import cli, one_line
from testkit.forward_support import forwarder, post_event, run_worker
from testkit.processes import free_port
from testkit.support import at
from testkit.worker_process import worker_env

pytestmark = pytest.mark.timeout(120)

CID = "assimilate_seem"
URI = f"fivetran://connector/{CID}"
#: Every leaf command, with arguments that are valid on their own.
COMMANDS: list[list[str]] = [
    ["connectors"],
    ["history", CID],
    ["decide", CID, "--target", "2026-01-10"],
    ["deliveries"],
    ["replay", "s1"],
    ["replay", "--all-undelivered"],
    ["datasets", "check"],
    ["worker", "--burst"],
]


@pytest.fixture
def env(settings: Settings, airflow2_standin: Airflow2StandIn) -> dict[str, str]:
    """A CLI environment on the suite's Redis and the Airflow 2 stand-in."""
    return {
        **worker_env(settings),
        "FIVETRAN_EVENTS_AIRFLOW_URL": airflow2_standin.url,
        "FIVETRAN_EVENTS_AIRFLOW_USERNAME": airflow2_standin.username,
        "FIVETRAN_EVENTS_AIRFLOW_PASSWORD": airflow2_standin.password,
    }


@pytest.fixture
def recorded(http: Any) -> None:
    """One connector with a success on Jan 10 and a failure on Jan 12."""
    post_event(http, sync_id="ok-1", created=at(10))
    post_event(http, sync_id="fail-1", created=at(12), status="FAILURE", reason="quota")


class TestExitCodes:
    @pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
    def test_unreachable_redis_is_4_in_one_line(self, env: dict[str, str], args: list[str]) -> None:
        """Every command tells 'cannot reach Redis' (4) apart from a failed sync (1)."""
        env = {**env, "FIVETRAN_EVENTS_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
        result = cli(env, *args)
        assert result.exit_code == 4, result.output
        line = one_line(result)
        assert "cannot reach Redis" in line and "FIVETRAN_EVENTS_REDIS_URL" in line

    @pytest.mark.usefixtures("recorded")
    def test_unknown_connector_and_bad_setting_are_usage_errors(self, env: dict[str, str]) -> None:
        result = cli(env, "decide", "nobody", "--target", "2026-01-10")
        assert result.exit_code == 2 and "connectors" in one_line(result)
        result = cli({**env, "FIVETRAN_EVENTS_REDIS_URL": "http://nope"}, "connectors")
        assert result.exit_code == 2 and "FIVETRAN_EVENTS_REDIS_URL" in one_line(result)
        no_airflow = {k: v for k, v in env.items() if "AIRFLOW" not in k}
        result = cli(no_airflow, "datasets", "check")
        assert result.exit_code == 2 and "FIVETRAN_EVENTS_AIRFLOW_URL" in one_line(result)


@pytest.mark.usefixtures("recorded")
class TestDatasetsCheck:
    def test_unreachable_airflow_is_4_not_missing(self, env: dict[str, str]) -> None:
        """A closed Airflow port is an error of its own, never 'a dataset is missing'."""
        env = {**env, "FIVETRAN_EVENTS_AIRFLOW_URL": f"http://127.0.0.1:{free_port()}"}
        result = cli(env, "datasets", "check")
        assert result.exit_code == 4, result.output
        assert "FIVETRAN_EVENTS_AIRFLOW_URL" in one_line(result)

    def test_refused_login_is_5_and_names_the_settings(self, env: dict[str, str]) -> None:
        env = {**env, "FIVETRAN_EVENTS_AIRFLOW_PASSWORD": "wrong-password-123"}
        result = cli(env, "datasets", "check")
        assert result.exit_code == 5, result.output
        line = one_line(result)
        assert "FIVETRAN_EVENTS_AIRFLOW_USERNAME" in line and "wrong-password-123" not in line


class TestJsonEverywhere:
    @pytest.mark.usefixtures("recorded")
    def test_replay_and_deliveries_json(
        self, env: dict[str, str], airflow2_standin: Airflow2StandIn
    ) -> None:
        airflow2_standin.add_dataset(URI)
        result = cli(env, "replay", "--since", "2026-01-01", "--json")
        assert result.exit_code == 0, result.output
        body = json.loads(result.stdout)
        assert body["since"] == "2026-01-01T00:00:00.000Z" and body["already_delivered"] == 0
        assert body["created"] + body["replayed"] <= 1
        assert json.loads(cli(env, "deliveries", "--json").stdout)["deliveries"][0]["uri"] == URI


class TestConnectors:
    @pytest.mark.usefixtures("recorded")
    def test_lists_last_success_failure_running_and_forwarding(
        self, http: Any, env: dict[str, str]
    ) -> None:
        """One aligned row per connector; --json carries the same and the deliveries."""
        post_event(http, event="sync_start", connector_id="other_one", sync_id="run-1")
        result = cli(env, "connectors")
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[0].split() == [
            "CONNECTOR",
            "NAME",
            "STATE",
            "LAST",
            "SUCCESS",
            "LAST",
            "FAILURE",
            "OVERDUE",
            "RUNNING",
            "FORWARDING",
        ]
        rows = {line.split()[0]: line for line in lines[1:]}
        assert set(rows) == {CID, "other_one"}
        assert "2026-01-10" in rows[CID] and "2026-01-12" in rows[CID]
        assert "run-1" in rows["other_one"]
        assert rows[CID].split()[2] == "active"
        assert rows[CID].rstrip().endswith("pending")
        # aligned: every column starts where its header does
        for header in ("STATE", "LAST SUCCESS", "RUNNING", "FORWARDING"):
            col = lines[0].index(header)
            assert all(line[col - 2 : col] == "  " for line in lines[1:]), (header, lines)
        body = json.loads(cli(env, "connectors", "--json").stdout)
        mine = next(c for c in body["connectors"] if c["connector_id"] == CID)
        assert mine["last_success"]["sync_id"] == "ok-1"
        assert mine["last_failure"]["sync_id"] == "fail-1"
        assert [d["state"] for d in mine["forwarding"]] == ["pending"]
        assert mine["lifecycle"]["state"] == "active" and mine["lifecycle"]["setup"] is None

    @pytest.mark.usefixtures("recorded")
    def test_forwarding_state_follows_the_worker(
        self, env: dict[str, str], settings: Settings, airflow2_standin: Airflow2StandIn
    ) -> None:
        run_worker(
            forwarder(
                settings, airflow2_standin.url, airflow2_standin.username, airflow2_standin.password
            )
        )
        assert cli(env, "connectors").stdout.splitlines()[1].rstrip().endswith("undelivered")
        off = {k: v for k, v in env.items() if k != "FIVETRAN_EVENTS_AIRFLOW_URL"}
        assert cli(off, "connectors").stdout.splitlines()[1].rstrip().endswith("off")
