"""What the CLI's --help promises scripts: every exit code named, and --json on the
commands that print or log (the commands keeping it: tests/integration/webhook_app/
test_cli_contract.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from webhook_app.cli import main


class TestExitCodes:
    def test_help_documents_every_exit_code(self) -> None:
        """--help names 0-5, so a script author need not read the source."""
        out = CliRunner().invoke(main, ["--help"]).output
        for text in ("0 success", "1 the sync failed", "2 usage error", "3 wait", "4 cannot reach"):
            assert text in " ".join(out.split()), out


class TestJsonEverywhere:
    @pytest.mark.parametrize("command", ["connectors", "replay", "worker", "serve"])
    def test_every_command_takes_json(self, command: str) -> None:
        """The commands that printed only text (or logged only text) take --json too."""
        assert "--json" in CliRunner().invoke(main, [command, "--help"]).output
