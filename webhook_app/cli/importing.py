"""``fivetran-events import``: day one, the sync history Fivetran's LOG table already has."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from fivetran_events import load_settings
from fivetran_events.log_import import (
    DEFAULT_SCHEMA,
    RowFilter,
    Summary,
    events_of,
    read_database,
    read_file,
    record_events,
)
from fivetran_events.model import is_valid_id

from ..state import State
from .helpers import CliError, ExitCode, clean_errors, echo, emit_json, json_option, parse_time

#: Without a terminal, ``--progress`` prints a line every this many rows.
PROGRESS_EVERY = 100_000
#: The database's password for --from-db: never in the URL, whose arguments every user of
#: the machine can read (ps, /proc/PID/cmdline).
DB_PASSWORD_VARIABLE = "FIVETRAN_EVENTS_IMPORT_DB_PASSWORD"  # noqa: S105 (a name)


def database_url(url: str, password_file: Path | None) -> str:
    """Return ``url`` with the password from ``password_file`` (its first line) or
    DB_PASSWORD_VARIABLE, if either is given; refuse a URL that carries a password."""
    if urlsplit(url).password:
        raise click.BadParameter(
            "the URL holds a password, which any user of this machine can read in the "
            f"process list: give the URL without it and the password in {DB_PASSWORD_VARIABLE} "
            "or a file (--db-password-file)",
            param_hint="--from-db",
        )
    if password_file is not None:
        try:
            lines = password_file.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise CliError(
                f"--db-password-file: cannot read {password_file}: {exc.strerror}", ExitCode.USAGE
            ) from None
        password = lines[0].strip() if lines else ""
        if not password:
            raise CliError(f"--db-password-file: {password_file} is empty", ExitCode.USAGE)
    else:
        password = os.environ.get(DB_PASSWORD_VARIABLE, "")
    if not password:
        return url
    try:
        from sqlalchemy.engine import make_url
    except ImportError:
        return url  # read_database says which extra to install
    try:
        parsed = make_url(url)
    except Exception:  # SQLAlchemy's ArgumentError: read_database names it
        return url
    return parsed.set(password=password).render_as_string(hide_password=False)


class Progress:
    """Rows read and recorded, on stderr: a bar on a terminal (bytes, or rows), else a line."""

    def __init__(
        self,
        summary: Summary,
        length: int,
        position: Callable[[], int] | None,
        stack: ExitStack,
    ) -> None:
        self.summary = summary
        self.position = position
        self.done = 0
        self.printed = 0
        self.bar: Any = None
        if sys.stderr.isatty():
            self.bar = stack.enter_context(
                click.progressbar(
                    length=max(length, 1),
                    label="Importing",
                    file=sys.stderr,
                    show_pos=False,
                    item_show_func=lambda text: text,
                )
            )

    def track(self, rows: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        n = 0
        for row in rows:
            yield row
            n += 1
            if n % 1000 == 0:
                self.show(n)
        self.show(n)

    def show(self, rows: int) -> None:
        s = self.summary
        if self.bar is not None:
            at = self.position() if self.position is not None else rows
            self.bar.update(at - self.done, f"{s.rows} rows read, {s.recorded} recorded")
            self.done = at
        elif s.rows - self.printed >= PROGRESS_EVERY:
            self.printed = s.rows
            click.echo(
                f"importing: {s.rows} rows read, {s.recorded} recorded, {s.known} already known",
                err=True,
            )


def _summary_text(summary: Summary, forward: bool) -> list[str]:
    fate = "forwarded to Airflow" if forward else "not forwarded, see --forward"
    lines = [
        f"rows read      {summary.rows}",
        f"recorded       {summary.recorded} ({summary.successes} successes: {fate})",
        f"already known  {summary.known}",
        f"skipped        {sum(summary.skipped.values())}",
    ]
    lines += [f"  {count:>10}  {why}" for why, count in summary.skipped.most_common()]
    return lines


@click.command(name="import")
@click.option(
    "--from",
    "from_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="A CSV or JSON Lines export of the LOG table (docs/day-one.md has the queries).",
)
@click.option(
    "--from-db",
    "from_db",
    metavar="URL",
    help="A SQLAlchemy URL of the destination holding the LOG table, without a password "
    "(needs the 'import' extra; e.g. postgresql+psycopg://user@host/db).",
)
@click.option(
    "--db-password-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help=f"With --from-db: a file whose first line is the database's password "
    f"(or set {DB_PASSWORD_VARIABLE}).",
)
@click.option(
    "--schema",
    default=DEFAULT_SCHEMA,
    show_default=True,
    help="With --from-db: the Platform Connector's schema.",
)
@click.option("--since", help="Import only rows at or after this ISO 8601 time (naive: UTC).")
@click.option(
    "--connector",
    "connectors",
    multiple=True,
    help="Import only this connector's (connection's) rows; repeat for more.",
)
@click.option(
    "--forward",
    is_flag=True,
    help="Forward the recorded successes to Airflow as the webhook would (default: not).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show progress on stderr (default: when stderr is a terminal).",
)
@json_option
@clean_errors
def import_log(
    from_file: Path | None,
    from_db: str | None,
    db_password_file: Path | None,
    schema: str,
    since: str | None,
    connectors: tuple[str, ...],
    forward: bool,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Record the syncs in Fivetran's LOG table as if the webhook had delivered them.

    Every sync_start and sync_end row is recorded, marked imported (and the status rows
    that hold an older table's sync outcomes); other rows are counted as skipped, with
    why. Running it again changes nothing.
    """
    if (from_file is None) == (from_db is None):
        raise click.UsageError("give one of --from FILE or --from-db URL")
    if db_password_file is not None and from_db is None:
        raise click.UsageError("--db-password-file goes with --from-db")
    db_url = database_url(from_db, db_password_file) if from_db is not None else ""
    bad = [c for c in connectors if not is_valid_id(c)]
    if bad:
        raise click.BadParameter(
            f"{bad[0]!r} is not a connector id (1-128 letters, digits, '_', '.' or '-')",
            param_hint="--connector",
        )
    keep = RowFilter(None if since is None else parse_time(since, "--since"), set(connectors))
    s = load_settings()
    on_success = None
    if forward:
        state = State.from_settings(s)
        on_success = state.on_success
        if on_success is None or not state.forwarding:
            raise click.UsageError(
                "--forward needs FIVETRAN_EVENTS_AIRFLOW_URL: there is no Airflow to forward to"
            )
    client = s.redis_client()
    client.ping()  # fail before reading anything when Redis is unreachable
    summary = Summary()
    show = sys.stderr.isatty() if progress is None else progress
    with ExitStack() as stack:
        rows: Iterable[Mapping[str, Any]]
        if from_file is not None:
            found = read_file(from_file)
            columns, rows, length, position = found.columns, found.rows, found.size, found.position
        else:
            db = read_database(db_url, schema, keep)
            columns, rows, length, position = db.columns, db.rows, db.count, None
        meter = Progress(summary, length, position, stack) if show else None
        if meter is not None:
            rows = meter.track(rows)
        record_events(
            client,
            s.key_prefix,
            s.retention_ms,
            events_of(rows, columns, keep, summary),
            summary,
            s.max_clock_skew_ms,
            on_success=on_success,
        )
        if meter is not None:
            meter.show(summary.rows)  # the last batches were written after the last row
    if as_json:
        emit_json({**summary.to_dict(), "forwarded": forward, "source": "imported"})
        return
    where = str(from_file) if from_file is not None else f"{schema}.log"
    echo(f"Imported Fivetran's LOG table from {where}:")
    for line in _summary_text(summary, forward):
        echo(line)


COMMANDS = (import_log,)
