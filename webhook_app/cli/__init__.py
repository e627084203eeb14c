"""The ``fivetran-events`` command line: the group lives here, its modules add commands
(they never import this package). Every error is one line naming what to fix."""

from __future__ import annotations

import sys
from typing import Any

import click

from fivetran_events.exceptions import ConfigurationError

from .. import logs
from . import fivetran, forwarding, history, importing, serving
from .helpers import EXIT_CODES_HELP, ExitCode, echo
from .serving import DEFAULT_WORKERS


def _one_line(message: str) -> str:
    """Fold a message that quotes a multi-line answer (Airflow's, Redis's) into one line."""
    return " ".join(message.split())


class OneLineErrors(click.Group):
    """A group whose usage errors are one line (not click's usage block), like every
    other error of the CLI: scripts and log collectors read one line better."""

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


for _command in (
    *serving.COMMANDS,
    *history.COMMANDS,
    *forwarding.COMMANDS,
    *fivetran.COMMANDS,
    *importing.COMMANDS,
):
    main.add_command(_command)

__all__ = ["DEFAULT_WORKERS", "ExitCode", "main"]
