"""webhook_app/airflow_auth.py's pure parts: which one login the settings choose, the
exactly-one rule's errors, and when a JWT is renewed (logins against a real Airflow:
tests/system/)."""

from __future__ import annotations

import base64
import json
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fivetran_events import ConfigurationError, Settings
from webhook_app.airflow_auth import (
    TOKEN,
    TOKEN_COMMAND,
    TOKEN_FILE,
    TOKEN_MARGIN_SECONDS,
    PasswordLogin,
    StaticToken,
    TokenCommand,
    TokenFile,
    credentials,
    login_from_settings,
    renew_after,
)

#: Each way to log in: its settings, the Login it builds, the name errors give it.
WAYS: dict[str, tuple[dict[str, str], type, str]] = {
    "password": (
        {"airflow_username": "u", "airflow_password": "p"},
        PasswordLogin,
        "FIVETRAN_EVENTS_AIRFLOW_USERNAME/_PASSWORD (or _CREDENTIALS_FILE)",
    ),
    "token": ({"airflow_token": "a-token"}, StaticToken, TOKEN),
    "file": ({"airflow_token_file": "/run/secrets/t"}, TokenFile, TOKEN_FILE),
    "command": ({"airflow_token_command": "print-token"}, TokenCommand, TOKEN_COMMAND),
}
SUBSETS = [c for n in range(len(WAYS) + 1) for c in combinations(WAYS, n)]


def jwt(claims: Any) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJIUzUxMiJ9.{body}.signature"


def settings(*ways: str, **more: Any) -> Settings:
    given_: dict[str, Any] = {}
    for way in ways:
        given_ |= WAYS[way][0]
    return Settings(airflow_url="http://127.0.0.1:9", **given_, **more)


class TestExactlyOne:
    @pytest.mark.parametrize("ways", SUBSETS, ids=lambda w: "+".join(w) or "none")
    def test_one_way_builds_its_login_and_any_other_count_is_refused(
        self, ways: tuple[str, ...]
    ) -> None:
        if len(ways) == 1:
            assert type(login_from_settings(settings(*ways))) is WAYS[ways[0]][1]
            return
        with pytest.raises(ConfigurationError) as refused:
            login_from_settings(settings(*ways))
        said, _, names = str(refused.value).partition(": ")
        named = [WAYS[w][2] for w in ways] if ways else [w[2] for w in WAYS.values()]
        assert names.split(", ") == named, str(refused.value)
        if ways:
            assert said == f"set exactly one way to log in to Airflow, not {len(ways)}"

    def test_a_blank_command_is_no_way_at_all(self) -> None:
        with pytest.raises(ConfigurationError, match="set one way to log in"):
            login_from_settings(settings(airflow_token_command="  \t "))
        assert type(login_from_settings(settings("token", airflow_token_command=" "))) is (
            StaticToken
        )

    def test_a_password_alone_or_a_credentials_file_counts_as_the_password_way(
        self, tmp_path: Path
    ) -> None:
        with pytest.raises(ConfigurationError, match="not 2"):
            login_from_settings(settings("token", airflow_password="p"))
        f = tmp_path / "cred"
        f.write_text("svc:pw\n")
        with pytest.raises(ConfigurationError, match="not 2"):
            login_from_settings(settings("file", airflow_credentials_file=str(f)))


class TestCredentialsFile:
    def test_an_unreadable_file_names_the_variable(self, tmp_path: Path) -> None:
        missing = tmp_path / "absent"
        with pytest.raises(ConfigurationError, match=r"CREDENTIALS_FILE.*cannot read it"):
            credentials(Settings(airflow_credentials_file=str(missing)))

    @pytest.mark.parametrize(
        "text", ['{"username": "u"}', "{not json: hunter2", '{"user": "u", "pass": "hunter2"}']
    )
    def test_bad_json_is_named_and_never_quoted(self, tmp_path: Path, text: str) -> None:
        f = tmp_path / "cred"
        f.write_text(text)
        with pytest.raises(ConfigurationError, match="expected JSON") as refused:
            credentials(Settings(airflow_credentials_file=str(f)))
        assert text not in str(refused.value) and "hunter2" not in str(refused.value)

    @pytest.mark.parametrize("text", ["", ":no-user", "hunter2-without-a-colon"])
    def test_no_user_before_a_colon_is_named_and_never_quoted(
        self, tmp_path: Path, text: str
    ) -> None:
        f = tmp_path / "cred"
        f.write_text(text)
        with pytest.raises(ConfigurationError, match="'username:password'") as refused:
            credentials(Settings(airflow_credentials_file=str(f)))
        assert not text or text not in str(refused.value)


class TestRenewAfter:
    @given(st.integers(0, 2**40), st.integers(1, 10**9))
    def test_a_jwt_is_renewed_before_its_end_and_after_half_its_life(
        self, iat: int, life: int
    ) -> None:
        after = renew_after(jwt({"iat": iat, "exp": iat + life}))
        assert life / 2 <= after < life
        assert after >= life - TOKEN_MARGIN_SECONDS

    @given(st.integers(-(10**6), 0))
    def test_an_expired_or_backwards_jwt_is_renewed_now(self, life: int) -> None:
        assert renew_after(jwt({"iat": 1000, "exp": 1000 + life})) == 0.0

    @given(
        st.text(max_size=60)
        | st.builds(jwt, st.none() | st.integers() | st.lists(st.integers()))
        | st.builds(jwt, st.dictionaries(st.sampled_from(["iat", "exp", "sub"]), st.text()))
    )
    def test_anything_else_lives_an_hour_or_less_and_never_raises(self, token: str) -> None:
        after = renew_after(token)
        assert after == 3600.0 or 0.0 <= after < 3600.0
