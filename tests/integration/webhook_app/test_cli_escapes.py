"""The CLI's text for people never carries a control character from the history.

Connector names and failure reasons are whatever the Fivetran account's users typed: a
newline would forge a table row, an escape sequence would drive the terminal. The
history here is real (signed deliveries through the app into the suite's Redis), the
commands run through click's runner as scripts run them.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fivetran_events import Settings
from testkit.support import at, deliver, payload
from testkit.worker_process import worker_env
from webhook_app.cli import main

CID = "assimilate_seem"
#: Sets the terminal window's title (OSC 0), then clears the screen (CSI 2J).
OSC_TITLE = "\x1b]0;pwned\x07\x1b[2J"
FORGED_ROW = "ftar_pg\nforged_id  ftar_pg  2026-01-10T00:00:00.000Z"
#: Bidirectional controls that reorder what a terminal shows after them.
BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def unsafe(ch: str) -> bool:
    """Whether a terminal acts on ``ch`` instead of showing it (C0, DEL, C1, separators, bidi)."""
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in BIDI


def record(http: Any, name: str | None, reason: str | None) -> None:
    """A success on Jan 10 and a failure on Jan 12 of connector ``CID`` named ``name``."""
    for sync_id, day, status in (("ok-1", 10, "SUCCESSFUL"), ("fail-1", 12, "FAILURE")):
        body = payload(sync_id=sync_id, created=at(day), status=status)
        body["connector_name"] = name
        if status == "FAILURE":
            body["data"]["reason"] = reason
        deliver(http, body)


def cli(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


#: Every command whose text shows a connector name or a failure reason, and its rows.
TEXT_COMMANDS: list[tuple[list[str], int]] = [
    (["connectors"], 2),
    (["history", CID], 3),
    (["decide", CID, "--target", "2026-01-11"], 1),
]


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    return worker_env(settings)


class TestEscapes:
    def test_a_newline_in_a_name_forges_no_row(self, http: Any, env: dict[str, str]) -> None:
        """The connectors table keeps one line per connector; the newline shows as \\n."""
        record(http, FORGED_ROW, "quota")
        out = cli(env, "connectors")
        assert out.exit_code == 0, out.output
        lines = out.stdout.splitlines()
        assert len(lines) == 2, out.stdout
        assert "ftar_pg\\nforged_id" in lines[1]

    @pytest.mark.parametrize(("args", "rows"), TEXT_COMMANDS, ids=lambda a: str(a))
    def test_escape_sequences_are_shown_not_obeyed(
        self, http: Any, env: dict[str, str], args: list[str], rows: int
    ) -> None:
        """An OSC title, a screen clear, a bidi override: visible escapes, never raw."""
        record(http, f"name{OSC_TITLE}", f"reason{OSC_TITLE}\u202etxt.exe\u2028\x85\x9b31m")
        out = cli(env, *args)
        assert out.exit_code in (0, 1), out.output
        assert not any(unsafe(ch) for ch in out.stdout.replace("\n", "")), repr(out.stdout)
        assert len(out.stdout.split("\n")) == rows + 1, repr(out.stdout)
        assert "\\x1b]0;pwned\\x07\\x1b[2J" in out.stdout
        if args[0] != "connectors":  # the reason's column (decide quotes it too)
            assert "\\u202etxt.exe\\u2028\\x85\\x9b31m" in out.stdout

    @pytest.mark.parametrize(
        "args", [["connectors", "--json"], ["history", CID, "--json"]], ids=lambda a: a[0]
    )
    def test_json_keeps_the_exact_text(
        self, http: Any, env: dict[str, str], args: list[str]
    ) -> None:
        """--json is for programs: the name and reason come back exactly as recorded."""
        name, reason = f"name{OSC_TITLE}\n\u202e", f"reason{OSC_TITLE}\u2028"
        record(http, name, reason)
        body = json.loads(cli(env, *args).stdout)
        if args[0] == "connectors":
            assert body["connectors"][0]["connector_name"] == name
        else:
            assert body["syncs"][0]["reason"] == reason

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        name=st.text(st.characters(codec="utf-8"), max_size=30),
        reason=st.text(st.characters(codec="utf-8"), min_size=1, max_size=30),
    )
    def test_no_line_ever_holds_a_control_character(
        self,
        http: Any,
        client: redis.Redis,
        env: dict[str, str],
        name: str,
        reason: str,
    ) -> None:
        """Whatever a name or reason holds, each command prints its rows and only them."""
        client.flushdb()
        record(http, name, reason)
        for args, rows in TEXT_COMMANDS:
            out = cli(env, *args)
            assert out.exit_code in (0, 1), out.output
            lines = out.stdout.split("\n")
            assert lines[-1] == "" and len(lines) == rows + 1, (args, out.stdout)
            for line in lines:
                assert not any(unsafe(ch) for ch in line), (args, line)
