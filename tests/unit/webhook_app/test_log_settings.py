"""The logging settings are read through fivetran_events.settings, as every other one."""

from __future__ import annotations

import io

import pytest
from click.testing import CliRunner

from fivetran_events.exceptions import ConfigurationError
from fivetran_events.settings import log_settings
from webhook_app import logs
from webhook_app.cli import main


class TestLogSettings:
    def test_defaults(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("FIVETRAN_EVENTS_LOG_FORMAT", raising=False)
        monkeypatch.delenv("FIVETRAN_EVENTS_LOG_LEVEL", raising=False)
        s = log_settings()
        assert (s.log_format, s.log_level) == ("auto", "INFO")

    def test_words_in_any_case(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("FIVETRAN_EVENTS_LOG_FORMAT", " Console ")
        monkeypatch.setenv("FIVETRAN_EVENTS_LOG_LEVEL", "debug")
        s = log_settings()
        assert (s.log_format, s.log_level) == ("console", "DEBUG")

    @pytest.mark.parametrize(
        ("name", "value"),
        [("FIVETRAN_EVENTS_LOG_FORMAT", "xml"), ("FIVETRAN_EVENTS_LOG_LEVEL", "LOUD")],
    )
    def test_a_bad_word_names_its_variable(
        self, monkeypatch: pytest.MonkeyPatch, name: str, value: str
    ) -> None:
        monkeypatch.setenv(name, value)
        with pytest.raises(ConfigurationError, match=name):
            log_settings()

    def test_the_format_decides_over_the_terminal(self, monkeypatch: pytest.MonkeyPatch) -> None:
        class Tty(io.StringIO):
            def isatty(self) -> bool:
                return True

        monkeypatch.delenv("FIVETRAN_EVENTS_LOG_FORMAT", raising=False)
        assert logs.wants_json(io.StringIO()) and not logs.wants_json(Tty())
        monkeypatch.setenv("FIVETRAN_EVENTS_LOG_FORMAT", "json")
        assert logs.wants_json(Tty())
        monkeypatch.setenv("FIVETRAN_EVENTS_LOG_FORMAT", "console")
        assert not logs.wants_json(io.StringIO())


def test_the_cli_refuses_a_bad_level_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit 2 (a bad setting) naming the variable, before any command runs."""
    monkeypatch.setenv("FIVETRAN_EVENTS_LOG_LEVEL", "LOUD")
    result = CliRunner().invoke(main, ["connectors", "--help"])
    assert result.exit_code == 2
    assert "FIVETRAN_EVENTS_LOG_LEVEL" in result.output
    assert "Traceback" not in result.output and "Usage:" not in result.output
