"""What every command of the CLI shares: exit codes (one per outcome a script may act
on), error lines, tables, JSON, clients."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from enum import IntEnum
from functools import wraps
from typing import Any, TypeVar

import click
import redis

from fivetran_events import (
    ConfigurationError,
    FivetranEventsError,
    HistoryReader,
    Settings,
    load_settings,
)
from fivetran_events.exceptions import FivetranApiError, FivetranAuthFailed, FivetranUnavailable
from fivetran_events.freshness import Freshness
from fivetran_events.model import is_valid_id
from fivetran_events.timeutil import parse_iso, to_ms

from ..exceptions import AirflowError, AirflowLoginUnavailable, AirflowRejected, AirflowUnavailable

F = TypeVar("F", bound=Callable[..., Any])


class ExitCode(IntEnum):
    """The exit statuses of ``fivetran-events``, one per thing a script may act on."""

    OK = 0
    #: decide: the sync failed; datasets check: a URI is missing in Airflow; fivetran
    #: webhooks test: the webhook's URL did not answer Fivetran's sample with a 2xx.
    FAILED = 1
    #: a wrong option or argument, a bad ``FIVETRAN_EVENTS_*`` setting, an unknown connector.
    USAGE = 2
    #: decide: no answer yet, ask again later.
    WAIT = 3
    #: Redis, Airflow or Fivetran's API cannot be reached (refused, timed out, 5xx, 429).
    UNREACHABLE = 4
    #: Redis, Airflow or Fivetran answered with an error (e.g. a refused login).
    ERROR = 5


#: The ``--help`` text and the manual's table (docs/reading-history.md) say the same.
EXIT_CODES_HELP = (
    "Exit codes: 0 success; 1 the sync failed (decide), a dataset is missing "
    "(datasets check) or a webhook's test failed (fivetran webhooks test); 2 usage error "
    "(options, arguments, FIVETRAN_EVENTS_* settings, unknown connector or webhook); "
    "3 wait (decide); 4 cannot reach Redis, Airflow or Fivetran; 5 Redis, Airflow or "
    "Fivetran answered with an error."
)


class CliError(click.ClickException):
    """Raised for an expected failure: one line on stderr and the exit code given."""

    def __init__(self, message: str, exit_code: int = ExitCode.ERROR) -> None:
        super().__init__(message)
        self.exit_code = int(exit_code)  # type: ignore[misc]  # click reads it per instance


def as_cli_error(exc: BaseException) -> CliError | None:
    """Name what to fix for an error of ours, Redis or Airflow; None for anything else."""
    if isinstance(exc, ConfigurationError):
        return CliError(str(exc), ExitCode.USAGE)
    if isinstance(exc, FivetranApiError):
        return _fivetran_error(exc)
    if isinstance(exc, FivetranEventsError):
        return CliError(str(exc), ExitCode.ERROR)
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return CliError(
            f"cannot reach Redis ({exc}): check FIVETRAN_EVENTS_REDIS_URL and that Redis runs",
            ExitCode.UNREACHABLE,
        )
    if isinstance(exc, redis.RedisError):
        return CliError(f"Redis answered with an error: {exc}", ExitCode.ERROR)
    if isinstance(exc, AirflowLoginUnavailable):
        return CliError(
            f"no token for Airflow now ({exc}): check the FIVETRAN_EVENTS_AIRFLOW_TOKEN_* setting",
            ExitCode.UNREACHABLE,
        )
    if isinstance(exc, AirflowUnavailable):
        return CliError(
            f"cannot reach Airflow ({exc}): check FIVETRAN_EVENTS_AIRFLOW_URL and that "
            "Airflow's API server runs",
            ExitCode.UNREACHABLE,
        )
    if isinstance(exc, AirflowRejected) and exc.status in (401, 403):
        return CliError(
            f"Airflow refused the worker's login ({exc}): check "
            "FIVETRAN_EVENTS_AIRFLOW_USERNAME/_PASSWORD (or _CREDENTIALS_FILE, or the "
            "_TOKEN, _TOKEN_FILE, _TOKEN_COMMAND given) and its role",
            ExitCode.ERROR,
        )
    if isinstance(exc, AirflowError):
        return CliError(f"Airflow answered with an error: {exc}", ExitCode.ERROR)
    return None


def _fivetran_error(exc: FivetranApiError) -> CliError:
    """Name what to fix for a failed call to Fivetran's API (its message names the call)."""
    if isinstance(exc, FivetranUnavailable):
        if exc.status is None:
            hint = "check FIVETRAN_EVENTS_FIVETRAN_API_URL and the network"
            if exc.maybe_sent:
                hint += "; the call may have been applied: look before repeating it"
            return CliError(f"cannot reach Fivetran's API ({exc}): {hint}", ExitCode.UNREACHABLE)
        return CliError(f"Fivetran's API is unavailable now ({exc})", ExitCode.UNREACHABLE)
    if isinstance(exc, FivetranAuthFailed):
        return CliError(
            f"Fivetran refused the API key ({exc}): check FIVETRAN_EVENTS_FIVETRAN_API_KEY, "
            "_SECRET and the key's permissions",
            ExitCode.ERROR,
        )
    return CliError(f"Fivetran answered with an error: {exc}", ExitCode.ERROR)


def clean_errors(func: F) -> F:
    """Turn expected failures into one line naming what to fix, with their exit code."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            error = as_cli_error(exc)
            if error is None:
                raise
            raise error from None

    return wrapper  # type: ignore[return-value]


#: What a terminal acts on instead of showing: C0 controls and DEL (a newline forges a table
#: row, ESC starts a sequence that can set the window title or rewrite the screen), C1
#: controls (0x9b is a one-byte ESC [), the Unicode line and paragraph separators, and the
#: bidirectional marks, embeddings, overrides and isolates that reorder what follows them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    return _SHORT_ESCAPES.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(value: object) -> str:
    """Return ``value`` with control characters as escapes (``\\n``, ``\\x1b``): connector
    names and Airflow's answers are chosen by others, and printed raw could drive the terminal."""
    return _CONTROL.sub(_escape, str(value))


def echo(text: object, err: bool = False) -> None:
    """Print one line for people, its control characters escaped (``printable``)."""
    click.echo(printable(text), err=err)


def json_option(func: F) -> F:
    """Add ``--json``: print one JSON document on stdout instead of text for people."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)


def emit_json(body: Any) -> None:
    click.echo(json.dumps(body, indent=2))


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    """Print ``rows`` under ``headers``, each column as wide as its widest cell but the
    last; ``None`` shows as ``-``, control characters as escapes."""
    cells = [[printable(h) for h in headers]] + [
        ["-" if v is None else printable(v) for v in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        line = "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths[:-1], strict=True))
        click.echo(f"{line}  {r[-1]}".rstrip() if len(r) > 1 else r[0])


def reader(s: Settings | None = None) -> HistoryReader:
    s = s or load_settings()
    return HistoryReader(
        s.redis_client(), s.key_prefix, s.max_sync_duration_ms, Freshness.from_settings(s)
    )


def check_id(value: str, hint: str) -> None:
    if not is_valid_id(value):
        raise click.BadParameter(
            "must be 1-128 characters of letters, digits, '_', '.' or '-'", param_hint=hint
        )


def check_connector(history: HistoryReader, connector_id: str) -> None:
    """Refuse a malformed or unrecorded connector id (usage errors, exit 2)."""
    check_id(connector_id, "CONNECTOR_ID")
    if not history.known(connector_id):
        raise CliError(
            f"no events recorded for connector '{connector_id}': "
            "see `fivetran-events connectors` for the recorded ones",
            ExitCode.USAGE,
        )


def parse_time(value: str, hint: str) -> int:
    """Epoch ms of an ISO 8601 option value (naive means UTC), or a usage error."""
    try:
        return to_ms(parse_iso(value))
    except (ValueError, OverflowError) as exc:
        raise click.BadParameter(
            f"{exc} (give an ISO 8601 time, e.g. 2026-01-01T00:00:00Z)", param_hint=hint
        ) from None


def exit_with(code: int) -> None:
    sys.exit(int(code))
