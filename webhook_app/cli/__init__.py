"""The ``fivetran-events`` command line: the group lives here, its modules add commands
(they never import this package). Every error is one line naming what to fix.

A command's module is imported when the command runs (``COMMANDS``), so each program
loads only its own: ``worker`` never loads the web app's Flask, ``serve`` no RQ worker.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from fivetran_events.exceptions import ConfigurationError

from .. import logs
from .helpers import EXIT_CODES_HELP, ExitCode, echo

#: Each command's name and the module (of this package) that defines it in ``COMMANDS``.
COMMANDS: dict[str, str] = {
    "serve": "serving",
    "connectors": "history",
    "history": "history",
    "decide": "history",
    "worker": "forwarding",
    "deliveries": "forwarding",
    "replay": "forwarding",
    "datasets": "forwarding",
    "fivetran": "fivetran",
    "reconcile": "fivetran",
    "import": "importing",
    "redis": "redis_acl",
}


def _one_line(message: str) -> str:
    """Fold a message that quotes a multi-line answer (Airflow's, Redis's) into one line."""
    return " ".join(message.split())


class OneLineErrors(click.Group):
    """A group whose usage errors are one line (not click's usage block), like every other error
    of the CLI (scripts and log collectors read one line better); commands load when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        commands: list[click.Command] = importlib.import_module(f"{__name__}.{module}").COMMANDS
        return next(c for c in commands if c.name == cmd_name)

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = f" (see {exc.ctx.command_path} --help)" if exc.ctx else ""
            echo(f"Error: {_one_line(exc.format_message())}{where}", err=True)
            sys.exit(ExitCode.USAGE)
        except click.ClickException as exc:
            echo(f"Error: {_one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            echo("Aborted.", err=True)
            sys.exit(ExitCode.ERROR)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else ExitCode.OK)


@click.group(
    cls=OneLineErrors,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EXIT_CODES_HELP,
)
@click.version_option(package_name="fivetran-events")
def main() -> None:
    """Turn Fivetran webhooks into a sync history and Airflow dataset events."""
    try:
        logs.configure()
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None


__all__ = ["COMMANDS", "ExitCode", "main"]
