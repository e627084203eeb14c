"""Managed Airflow's logins: exactly one way is configured, each yields a token and says
when to get another (the real Airflow 3 is in tests/system/webhook_app/test_forward_tokens.py)."""

from __future__ import annotations

import base64
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from fivetran_events import ConfigurationError, Settings
from webhook_app.airflow_auth import (
    PasswordLogin,
    StaticToken,
    TokenCommand,
    TokenFile,
    login_from_settings,
    renew_after,
)
from webhook_app.exceptions import AirflowLoginUnavailable


def jwt(**claims: Any) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJIUzUxMiJ9.{body}.signature"


def settings(**login: Any) -> Settings:
    return Settings(airflow_url="http://127.0.0.1:9", **login)


def no_send(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("this login never calls Airflow")


class TestExactlyOneLogin:
    def test_none_names_every_way(self) -> None:
        with pytest.raises(ConfigurationError, match="set one way to log in") as caught:
            login_from_settings(settings())
        said = str(caught.value)
        for name in ("_USERNAME/_PASSWORD", "_TOKEN,", "_TOKEN_FILE", "_TOKEN_COMMAND"):
            assert name in said, said

    def test_two_are_refused_naming_both(self) -> None:
        both = settings(airflow_username="u", airflow_password="p", airflow_token_file="/t")
        with pytest.raises(ConfigurationError, match=r"exactly one way.*not 2") as caught:
            login_from_settings(both)
        assert "USERNAME/_PASSWORD" in str(caught.value) and "TOKEN_FILE" in str(caught.value)

    @pytest.mark.parametrize(
        ("login", "kind"),
        [
            ({"airflow_username": "u", "airflow_password": "p"}, PasswordLogin),
            ({"airflow_token": " a-token\n"}, StaticToken),
            ({"airflow_token_file": "/run/secrets/airflow"}, TokenFile),
            ({"airflow_token_command": "gcloud auth print-access-token"}, TokenCommand),
        ],
    )
    def test_each_way_alone_builds_its_login(self, login: dict[str, str], kind: type) -> None:
        assert isinstance(login_from_settings(settings(**login)), kind)

    def test_a_static_token_is_stripped_and_never_shown(self) -> None:
        s = settings(airflow_token=" a-token\n")
        login = login_from_settings(s)
        assert login.token(no_send, "POST", "/x")[0] == "a-token"
        assert "a-token" not in repr(s) and "a-token" not in login.describe

    def test_an_empty_command_is_a_configuration_error(self) -> None:
        with pytest.raises(ConfigurationError, match="TOKEN_COMMAND is empty"):
            TokenCommand("   ")


class TestWhenToGetAnother:
    def test_a_jwt_is_renewed_a_minute_before_its_end(self) -> None:
        assert renew_after(jwt(iat=1000, exp=4600)) == 3600 - 60

    def test_an_opaque_token_lives_an_hour(self) -> None:
        assert renew_after("opaque-token") == 3600.0

    def test_a_static_token_lives_until_refused(self) -> None:
        assert StaticToken("t").token(no_send, "POST", "/x") == ("t", math.inf)

    def test_a_token_file_is_read_again_when_it_changes(self, tmp_path: Path) -> None:
        path = tmp_path / "token"
        path.write_text("first\n")
        login = TokenFile(str(path))
        assert login.changed()  # never read
        assert login.token(no_send, "POST", "/x") == ("first", math.inf)
        assert not login.changed()
        rotated = tmp_path / "token.new"
        rotated.write_text("second\n")
        os.replace(rotated, path)  # as a rotating sidecar writes it
        assert login.changed()
        assert login.token(no_send, "POST", "/x")[0] == "second"

    @pytest.mark.parametrize("content", [None, "", "\n \n"])
    def test_a_missing_or_empty_file_is_a_retry_that_sent_nothing(
        self, tmp_path: Path, content: str | None
    ) -> None:
        path = tmp_path / "token"
        if content is not None:
            path.write_text(content)
        with pytest.raises(AirflowLoginUnavailable, match="TOKEN_FILE") as caught:
            TokenFile(str(path)).token(no_send, "POST", "/api/v2/assets/events")
        assert caught.value.maybe_sent is False
        assert str(caught.value).startswith("POST /api/v2/assets/events: no token for Airflow")


def test_the_cli_names_the_token_setting_when_no_token_can_be_had(tmp_path: Path) -> None:
    """A CLI command that meets a failing login says which setting to check (exit 4)."""
    from webhook_app.cli.helpers import ExitCode, as_cli_error

    with pytest.raises(AirflowLoginUnavailable) as caught:
        TokenFile(str(tmp_path / "gone")).token(no_send, "GET", "/api/v2/assets")
    error = as_cli_error(caught.value)
    assert error is not None and error.exit_code == ExitCode.UNREACHABLE
    assert "FIVETRAN_EVENTS_AIRFLOW_TOKEN_* setting" in error.message
