"""``fivetran-events redis acl``'s printed lines, run in this process: both users, their
passwords only hashed, names and prefix followed, a missing or short password a usage
error (applied to a real redis-server: tests/integration/webhook_app/test_redis_acl.py)."""

from __future__ import annotations

import hashlib

import pytest
from click.testing import CliRunner

from testkit.redis_acl import AIRFLOW_PASSWORD, APP_PASSWORD, acl_env, acl_lines
from webhook_app.cli import main

PREFIX = "test:"
ENV = acl_env(PREFIX)


def acl(*args: str, **env: str) -> list[str]:
    return acl_lines(PREFIX, *args, **env)


class TestPrinted:
    def test_two_users_with_hashed_passwords_never_in_clear(self) -> None:
        lines = acl()
        assert [line.split()[2] for line in lines] == ["fivetran-events", "fivetran-events-airflow"]
        for line, password in zip(lines, (APP_PASSWORD, AIRFLOW_PASSWORD), strict=True):
            assert f"#{hashlib.sha256(password.encode()).hexdigest()}" in line.split()
            assert password not in line and ">" not in line

    def test_names_are_overridable_and_the_prefix_followed(self) -> None:
        lines = acl(
            "--app-user", "fte-app", "--airflow-user", "af", FIVETRAN_EVENTS_KEY_PREFIX="dw:"
        )
        assert [line.split()[2] for line in lines] == ["fte-app", "af"]
        assert "~dw:*" in lines[0].split() and "%R~dw:connectors" in lines[1].split()
        assert not [w for w in " ".join(lines).split() if "test:" in w]

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            (
                {"FIVETRAN_EVENTS_REDIS_APP_PASSWORD": ""},
                "FIVETRAN_EVENTS_REDIS_APP_PASSWORD is not set",
            ),
            ({"FIVETRAN_EVENTS_REDIS_AIRFLOW_PASSWORD": "short"}, "at least 24"),
        ],
    )
    def test_a_missing_or_short_password_is_a_usage_error(
        self, env: dict[str, str], message: str
    ) -> None:
        result = CliRunner().invoke(main, ["redis", "acl"], env={**ENV, **env})
        assert result.exit_code == 2 and message in result.output, result.output
        assert "short" not in result.output.replace("at least", "")
