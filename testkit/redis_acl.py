"""A redis-server with ``fivetran-events redis acl``'s two users applied, as deployed."""

from __future__ import annotations

import redis
from click.testing import CliRunner

from fivetran_events.acl import AIRFLOW_USER, APP_USER

from .own_redis import OwnRedis

APP_PASSWORD = "app-password-" + "a" * 24
AIRFLOW_PASSWORD = "airflow-password-" + "b" * 24


def acl_env(prefix: str) -> dict[str, str]:
    """What ``fivetran-events redis acl`` reads: the key prefix and both passwords."""
    return {
        "FIVETRAN_EVENTS_KEY_PREFIX": prefix,
        "FIVETRAN_EVENTS_REDIS_APP_PASSWORD": APP_PASSWORD,
        "FIVETRAN_EVENTS_REDIS_AIRFLOW_PASSWORD": AIRFLOW_PASSWORD,
    }


def acl_lines(prefix: str, *args: str, **env: str) -> list[str]:
    """The command's output lines, run in this process."""
    from webhook_app.cli import main

    result = CliRunner().invoke(main, ["redis", "acl", *args], env={**acl_env(prefix), **env})
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def apply_acl(server: OwnRedis, prefix: str) -> None:
    """Run the printed ``ACL SETUSER`` lines as the default user (the admin)."""
    admin = server.client()
    for line in acl_lines(prefix):
        assert line.startswith("ACL SETUSER ")
        assert admin.execute_command(*line.split()) in (b"OK", "OK")


def user_url(server: OwnRedis, user: str, password: str) -> str:
    return f"redis://{user}:{password}@127.0.0.1:{server.port}/0"


def app_url(server: OwnRedis) -> str:
    return user_url(server, APP_USER, APP_PASSWORD)


def airflow_url(server: OwnRedis) -> str:
    return user_url(server, AIRFLOW_USER, AIRFLOW_PASSWORD)


def as_user(server: OwnRedis, user: str, password: str) -> redis.Redis:
    return redis.Redis.from_url(user_url(server, user, password), socket_timeout=5)
