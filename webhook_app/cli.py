"""The ``fivetran-events`` command line: serve, history, decide.

Every error is one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click
import redis

from fivetran_events import (
    FivetranEventsError,
    HistoryReader,
    decide,
    load_settings,
    parse_criterion,
)
from fivetran_events.decision import Criterion
from fivetran_events.model import is_valid_id
from fivetran_events.timeutil import parse_iso, to_ms

F = TypeVar("F", bound=Callable[..., Any])

#: gunicorn's own advice: (2 x cores) + 1 sync workers. A delivery spends most of its
#: time waiting on three Redis round trips, so workers beyond the core count pay off.
DEFAULT_WORKERS = min(2 * (os.cpu_count() or 1) + 1, 17)


def clean_errors(func: F) -> F:
    """Turn expected failures into one clear line and exit status 1."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except FivetranEventsError as exc:
            raise click.ClickException(str(exc)) from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise click.ClickException(f"cannot reach Redis: {exc}") from None
        except redis.RedisError as exc:
            raise click.ClickException(f"Redis error: {exc}") from None

    return wrapper  # type: ignore[return-value]


def _reader() -> HistoryReader:
    settings = load_settings()
    client = redis.Redis.from_url(
        settings.redis_url,
        socket_timeout=settings.redis_timeout_seconds,
        socket_connect_timeout=settings.redis_timeout_seconds,
    )
    return HistoryReader(client, settings.key_prefix, settings.max_sync_duration_ms)


def _check_connector(reader: HistoryReader, connector_id: str) -> None:
    if not is_valid_id(connector_id):
        raise click.BadParameter(
            "must be 1-128 characters of letters, digits, '_', '.' or '-'",
            param_hint="CONNECTOR_ID",
        )
    if not reader.known(connector_id):
        raise click.ClickException(f"no events recorded for connector '{connector_id}'")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fivetran-events")
def main() -> None:
    """Turn Fivetran webhooks into a sync history and Airflow dataset events."""


@main.command()
@click.option("--host", help="Address to bind.  [default: 127.0.0.1]")
@click.option("--port", type=click.IntRange(1, 65535), help="Port.  [default: 8000]")
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    help="gunicorn worker processes.  [default: 2 x cores + 1]",
)
@click.option(
    "--config",
    "gunicorn_config",
    type=click.Path(exists=True, dir_okay=False),
    help="A gunicorn configuration file (deploy/gunicorn.conf.py for production).",
)
@clean_errors
def serve(
    host: str | None, port: int | None, workers: int | None, gunicorn_config: str | None
) -> None:
    """Run the webhook server under gunicorn.

    With --config, the file decides whatever --host, --port and --workers do not.
    """
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
    else:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="fte-metrics-")
    from webhook_app import create_app

    create_app()  # fail here, with one line, on bad configuration
    argv = [sys.executable, "-m", "gunicorn"]
    if gunicorn_config:
        argv += ["--config", gunicorn_config]
        if host or port:
            argv += ["--bind", f"{host or '127.0.0.1'}:{port or 8000}"]
        if workers:
            argv += ["--workers", str(workers)]
    else:
        argv += [
            "--bind",
            f"{host or '127.0.0.1'}:{port or 8000}",
            "--workers",
            str(workers or DEFAULT_WORKERS),
            "--graceful-timeout",
            "20",
        ]
    argv.append("webhook_app:create_app()")
    os.execv(sys.executable, argv)  # noqa: S606 (argv is ours, no shell involved)


@main.command()
@click.argument("connector_id")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@clean_errors
def history(connector_id: str, limit: int, as_json: bool) -> None:
    """Show a connector's syncs, newest first."""
    reader = _reader()
    _check_connector(reader, connector_id)
    rows = reader.syncs(connector_id, limit=limit)
    if as_json:
        click.echo(json.dumps({"connector_id": connector_id, "syncs": rows}, indent=2))
        return
    click.echo(f"{'SYNC ID':38} {'STATUS':18} {'STARTED':25} {'ENDED':25} REASON")
    for r in rows:
        click.echo(
            f"{r['sync_id']:38} {r['status']:18} {r['started_at'] or '-':25} "
            f"{r['ended_at'] or '-':25} {r['reason'] or ''}"
        )


@main.command(name="decide")
@click.argument("connector_id")
@click.option("--target", required=True, help="ISO 8601 time; naive means UTC.")
@click.option(
    "--propagate-failures-forward/--no-propagate-failures-forward", default=True, show_default=True
)
@click.option("--always-wait-when-syncing", is_flag=True, default=False)
@click.option(
    "--criterion",
    type=click.Choice([c.value for c in Criterion]),
    default=Criterion.ENDED_AFTER.value,
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@clean_errors
def decide_cmd(
    connector_id: str,
    target: str,
    propagate_failures_forward: bool,
    always_wait_when_syncing: bool,
    criterion: str,
    as_json: bool,
) -> None:
    """Decide whether CONNECTOR_ID was synced as of TARGET (exit 0 success, 1 fail, 3 wait)."""
    try:
        target_ms = to_ms(parse_iso(target))
    except (ValueError, OverflowError) as exc:
        raise click.BadParameter(str(exc), param_hint="--target") from None
    crit = parse_criterion(criterion)
    reader = _reader()
    _check_connector(reader, connector_id)
    facts = reader.facts(connector_id, target_ms, started_after=crit is Criterion.STARTED_AFTER)
    result = decide(
        facts,
        propagate_failures_forward=propagate_failures_forward,
        always_wait_when_syncing=always_wait_when_syncing,
        criterion=crit,
    )
    if as_json:
        click.echo(json.dumps({"connector_id": connector_id, **result.to_dict()}, indent=2))
    else:
        click.echo(f"{result.outcome.value.upper()}: {result.reason}")
    sys.exit({"success": 0, "fail": 1, "wait": 3}[result.outcome.value])


# Forwarding to Airflow (issue 3): commands live in cli_forward.py.
from . import cli_forward  # noqa: E402

for _command in cli_forward.COMMANDS:  # worker, deliveries, replay, datasets
    main.add_command(_command)
