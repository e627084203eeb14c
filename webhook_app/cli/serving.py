"""``fivetran-events serve``: the webhook app under gunicorn."""

from __future__ import annotations

import os
import sys
import tempfile

import click

from .. import logs
from .helpers import clean_errors, json_option

#: gunicorn's own advice: (2 x cores) + 1 workers. A delivery spends most of its
#: time waiting on three Redis round trips, so workers beyond the core count pay off.
DEFAULT_WORKERS = min(2 * (os.cpu_count() or 1) + 1, 17)
#: Threads of each (gthread) worker. A client sending its headers and part of a body, slowly or
#: never, holds one thread, not a worker: with more threads than such clients, a delivery and
#: /healthz still find one free (deploy/nginx.conf, in front, buffers bodies, cuts slow ones).
DEFAULT_THREADS = 32


@click.command()
@click.option("--host", help="Address to bind.  [default: 127.0.0.1]")
@click.option("--port", type=click.IntRange(1, 65535), help="Port.  [default: 8000]")
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    help="gunicorn worker processes.  [default: 2 x cores + 1]",
)
@click.option(
    "--threads",
    type=click.IntRange(1, 256),
    help=f"Threads of each worker.  [default: {DEFAULT_THREADS}]",
)
@click.option(
    "--config",
    "gunicorn_config",
    type=click.Path(exists=True, dir_okay=False),
    help="A gunicorn configuration file (deploy/gunicorn.conf.py for production).",
)
@json_option
@clean_errors
def serve(
    host: str | None,
    port: int | None,
    workers: int | None,
    threads: int | None,
    gunicorn_config: str | None,
    as_json: bool,
) -> None:
    """Run the webhook server under gunicorn (with --config, the file decides whatever
    --host, --port, --workers and --threads do not)."""
    if as_json:
        os.environ[logs.FORMAT_ENV] = "json"  # gunicorn and its workers inherit it
    from webhook_app import create_app

    create_app()  # fail here, with one line, on bad configuration
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Made only once the configuration is accepted: a refused start leaves nothing.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="fte-metrics-")
    argv = [sys.executable, "-m", "gunicorn"]
    bind = ["--bind", f"{host or '127.0.0.1'}:{port or 8000}"]
    if gunicorn_config:
        argv += ["--config", gunicorn_config, *(bind if host or port else [])]
        argv += ["--workers", str(workers)] if workers else []
        argv += ["--threads", str(threads)] if threads else []
    else:
        argv += [
            *bind,
            "--workers",
            str(workers or DEFAULT_WORKERS),
            "--worker-class",
            "gthread",
            "--threads",
            str(threads or DEFAULT_THREADS),
            # gunicornc's socket would let any process of this user resize or stop the server
            "--no-control-socket",
            "--graceful-timeout",
            "20",
            # gunicorn's own lines (start, worker boots, errors) in the same format, and
            # one access record per request: the only line a webhook delivery writes
            "--logger-class",
            "webhook_app.logs.GunicornLogger",
            "--access-logfile",
            "-",
        ]
    argv.append("webhook_app:create_app()")
    os.execv(sys.executable, argv)  # noqa: S606 (argv is ours, no shell involved)


COMMANDS: list[click.Command] = [serve]
