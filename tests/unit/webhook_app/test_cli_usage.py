"""The CLI's contract with scripts where no Redis is needed: --help names every exit code,
--json is on the commands that print or log, a usage error is 2 in one line before any
connection (Redis here is a closed port). With Redis: tests/integration/webhook_app/
test_cli_contract.py."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from testkit.cli import cli, one_line
from webhook_app.cli import main

CID = "assimilate_seem"


@pytest.fixture
def env() -> dict[str, str]:
    """Settings that name a Redis nothing listens on: a usage error must come first."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith("FIVETRAN_EVENTS_")}
    return {**keep, "FIVETRAN_EVENTS_REDIS_URL": "redis://127.0.0.1:1/0"}


class TestExitCodes:
    def test_help_documents_every_exit_code(self) -> None:
        """--help names 0-5, so a script author need not read the source."""
        out = CliRunner().invoke(main, ["--help"]).output
        for text in ("0 success", "1 the sync failed", "2 usage error", "3 wait", "4 cannot reach"):
            assert text in " ".join(out.split()), out

    @pytest.mark.parametrize(
        ("args", "needle"),
        [
            (["decide", CID], "--target"),
            (["decide", CID, "--target", "soon"], "--target"),
            (["history", CID, "--limit", "0"], "--limit"),
            (["history", "bad/id"], "CONNECTOR_ID"),
            (["deliveries", "--state", "lost"], "--state"),
            (["replay"], "SYNC_ID"),
            (["replay", "--since", "yesterday"], "--since"),
            (["connectors", "--bogus"], "--bogus"),
            (["nonsense"], "nonsense"),
        ],
    )
    def test_usage_errors_are_2_in_one_line(
        self, env: dict[str, str], args: list[str], needle: str
    ) -> None:
        """A wrong option or argument is 2, one line that names it."""
        result = cli(env, *args)
        assert result.exit_code == 2, result.output
        assert needle in one_line(result)


class TestJsonEverywhere:
    @pytest.mark.parametrize("command", ["connectors", "replay", "worker", "serve"])
    def test_every_command_takes_json(self, command: str) -> None:
        """The commands that printed only text (or logged only text) take --json too."""
        assert "--json" in CliRunner().invoke(main, [command, "--help"]).output
