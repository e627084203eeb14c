"""``fivetran-events redis acl``: the Redis users of a deployment (fivetran_events/acl.py)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from fivetran_events.acl import (
    AIRFLOW_PASSWORD_VARIABLE,
    AIRFLOW_USER,
    APP_PASSWORD_VARIABLE,
    APP_USER,
    users,
)
from fivetran_events.exceptions import ConfigurationError
from fivetran_events.settings import SECRETS_DIR_VARIABLE, history_defaults, secrets_dir

from .helpers import CliError, ExitCode, clean_errors


def read_secret(variable: str) -> str:
    """Return a secret the settings do not hold (a Redis user's password) as they read theirs:
    the variable, else its file (its name in lower case) in the secrets folder, stripped."""
    value = os.environ.get(variable)
    folder = secrets_dir()
    path = Path(folder, variable.lower()) if folder else None
    if not value and path is not None and path.is_file():
        try:
            value = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigurationError(f"{variable}: cannot read {path}: {exc.strerror}") from None
    if not value:
        raise CliError(
            f"{variable} is not set: set it (or put the password in a file "
            f"{variable.lower()} in {SECRETS_DIR_VARIABLE})",
            ExitCode.USAGE,
        )
    return value


@click.group(name="redis")
def redis_group() -> None:
    """Set Redis up for fivetran-events."""


@redis_group.command(name="acl")
@click.option("--app-user", default=APP_USER, show_default=True, help="The app's and workers'.")
@click.option("--airflow-user", default=AIRFLOW_USER, show_default=True, help="Airflow's.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["commands", "acl-file"]),
    default="commands",
    show_default=True,
    help="ACL SETUSER commands (for redis-cli), or the lines of an ACL file (aclfile).",
)
@click.option(
    "--default-user-off",
    is_flag=True,
    help="Also turn Redis's default user off: only these two users can connect then.",
)
@clean_errors
def acl(app_user: str, airflow_user: str, fmt: str, default_user_off: bool) -> None:
    """Print the ACL of the app's and Airflow's Redis users (Redis 7 or later).

    Passwords come from FIVETRAN_EVENTS_REDIS_APP_PASSWORD and
    FIVETRAN_EVENTS_REDIS_AIRFLOW_PASSWORD (or their files in FIVETRAN_EVENTS_SECRETS_DIR)
    and are printed as SHA-256 hashes only; key patterns follow FIVETRAN_EVENTS_KEY_PREFIX.
    Apply them with: fivetran-events redis acl | redis-cli --user admin --askpass
    """
    passwords = (read_secret(APP_PASSWORD_VARIABLE), read_secret(AIRFLOW_PASSWORD_VARIABLE))
    try:
        found = users(history_defaults().key_prefix, passwords, (app_user, airflow_user))
    except ValueError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None
    if fmt == "commands":
        lines = [u.command() for u in found] + ["ACL SETUSER default off"] * default_user_off
    else:
        lines = [u.acl_file_line() for u in found] + ["user default off"] * default_user_off
    click.echo("\n".join(lines))


COMMANDS: list[click.Command] = [redis_group]
