"""``fivetran-events worker | deliveries | replay | datasets check``: forwarding to Airflow."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
import threading
from typing import Any

import click

from fivetran_events import HistoryReader, load_settings
from fivetran_events.deliveries import DeliveryState
from fivetran_events.destinations import destination_tables, refresh, tables_fresh
from fivetran_events.model import is_valid_id
from fivetran_events.timeutil import iso

from .. import logs
from ..forwarding.forwarder import Forwarder
from ..forwarding.replay import Replayer
from ..forwarding.tables import common_prefix
from ..worker.build import build_forwarder
from ..worker.pool import WorkerPool, serve_metrics
from ..worker.rq_worker import ForwardingWorker, check_eviction
from ..worker.schedule import start_schedule
from .helpers import (
    CliError,
    ExitCode,
    clean_errors,
    echo,
    emit_json,
    exit_with,
    json_option,
    parse_time,
    table,
)

#: Worker processes ``fivetran-events worker`` runs by default.
DEFAULT_CONCURRENCY = 4


def _forwarder(with_airflow: bool) -> Forwarder:
    return build_forwarder(load_settings(), with_airflow=with_airflow)


def run_pool(
    forwarder: Forwarder,
    size: int,
    sweep_interval: float,
    metrics_port: int | None,
    name: str | None,
    burst: bool,
    as_json: bool,
) -> int:
    """Run ``size`` single workers under this process, serving their summed metrics."""
    base = name or f"{socket.gethostname()}.{os.getpid()}"

    def argv_of(slot: int, start: int) -> list[str]:
        argv = [sys.executable, "-m", "webhook_app", "worker", "--concurrency", "1"]
        argv += ["--name", f"{base}-{slot}.{start}", "--sweep-interval", str(sweep_interval)]
        return argv + (["--burst"] if burst else []) + (["--json"] if as_json else [])

    env = dict(os.environ)
    with contextlib.ExitStack() as stack:
        if metrics_port:
            shared = env.get("PROMETHEUS_MULTIPROC_DIR") or stack.enter_context(
                tempfile.TemporaryDirectory(prefix="fte-worker-metrics-")
            )
            env["PROMETHEUS_MULTIPROC_DIR"] = shared
            serve_metrics(forwarder.settings.metrics_host, metrics_port, shared)
        pool = WorkerPool(
            size, argv_of, env=env, burst=burst, stop_timeout=forwarder.lease_ms / 1000
        )
        return pool.run()


@click.command()
@click.option("--burst", is_flag=True, help="Work until the queue is empty, then exit.")
@click.option(
    "--sweep-interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.05),
    help="Seconds between checks for due retries and expired leases (a new delivery "
    "wakes the sweeper at once).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    help="Serve Prometheus metrics on PORT (of --metrics-host).",
)
@click.option(
    "--metrics-host",
    help="The address metrics are served on: 0.0.0.0 where Prometheus scrapes from "
    "another host (a pod). Default: FIVETRAN_EVENTS_METRICS_HOST, else 127.0.0.1.",
)
@click.option("--name", help="Worker name (default: RQ's host.pid; a pool's members: NAME-i.n).")
@click.option(
    "--concurrency",
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Deliveries attempted at once: worker processes under this one (1: this process).",
)
@json_option
@clean_errors
def worker(
    burst: bool,
    sweep_interval: float,
    metrics_port: int | None,
    metrics_host: str | None,
    name: str | None,
    concurrency: int,
    as_json: bool,
) -> None:
    """Run RQ workers that forward successful syncs to Airflow and send OpenLineage runs.

    With --concurrency N > 1 this process supervises N worker processes (one slow answer
    from Airflow holds up one delivery) and serves their metrics, summed, on --metrics-port.
    """
    if as_json:
        os.environ[logs.FORMAT_ENV] = "json"
        logs.configure()
    # Checks the settings before any member starts.
    settings = load_settings(**({"metrics_host": metrics_host} if metrics_host else {}))
    forwarder = build_forwarder(settings, with_airflow=True)
    forwarder.check_partitions()  # and that Airflow takes partition keys, when they are on
    if concurrency > 1:
        forwarder.redis.ping()  # and Redis: one clear error (exit 4), not N failing members
        check_eviction(forwarder.redis)
        raise SystemExit(
            run_pool(forwarder, concurrency, sweep_interval, metrics_port, name, burst, as_json)
        )
    if metrics_port:
        serve_metrics(settings.metrics_host, metrics_port)
    check_eviction(forwarder.redis)
    stop = threading.Event()
    forwarder.warm_up()  # token and version now, not in the first delivery's time
    forwarder.sweeper.sweep_backlog()  # what came due while no worker ran (a burst's only)
    sweeper = threading.Thread(
        target=forwarder.sweeper.run, args=(sweep_interval, stop), name="sweeper", daemon=True
    )
    sweeper.start()
    w = ForwardingWorker(forwarder, name=name)
    # RQ's scheduler only runs the reconcile schedule (worker/schedule.py): off without it.
    scheduler = not burst and start_schedule(forwarder.settings, forwarder.queue)
    try:
        w.work_until_stopped(burst=burst, with_scheduler=scheduler)
    finally:
        stop.set()


@click.command()
@click.option(
    "--state",
    "state_",
    type=click.Choice([s.value for s in DeliveryState]),
    help="Only deliveries in this state.",
)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@json_option
@clean_errors
def deliveries(state_: str | None, limit: int, as_json: bool) -> None:
    """List recent deliveries of syncs to Airflow datasets, newest first."""
    fw = _forwarder(with_airflow=False)
    rows = [d.to_dict() for d in fw.store.recent(limit, DeliveryState(state_) if state_ else None)]
    if as_json:
        emit_json({"deliveries": rows})
        return
    table(
        [
            (
                r["connector_id"],
                r["sync_id"],
                r["state"],
                r["attempts"],
                r["airflow_event_id"],
                r["uri"]
                + (f"  ({r['reason']})" if r["reason"] and r["state"] != "delivered" else ""),
            )
            for r in rows
        ],
        ("CONNECTOR", "SYNC ID", "STATE", "TRIES", "EVENT", "URI (REASON)"),
    )


@click.command()
@click.argument("sync_id", required=False)
@click.option(
    "--all-undelivered",
    is_flag=True,
    help="Replay every delivery given up (undelivered or failed).",
)
@click.option(
    "--since",
    "since",
    help="Forward every success that ended at or after this ISO 8601 time "
    "(naive means UTC), also those recorded while forwarding was off.",
)
@click.option(
    "--partitions",
    is_flag=True,
    help="With --since: post the partitioned asset events of every period since that time "
    "the history's successes completed (FIVETRAN_EVENTS_PARTITION_GRAIN), for a backfill.",
)
@click.option("--connector", "connector_id", help="Only this connector's deliveries.")
@json_option
@clean_errors
def replay(
    sync_id: str | None,
    all_undelivered: bool,
    since: str | None,
    partitions: bool,
    connector_id: str | None,
    as_json: bool,
) -> None:
    """Forward a sync (or every given-up delivery, or every success since a time) again, with a
    new retry window; delivered ones are left alone: replay never makes a second event."""
    if sum((bool(sync_id), all_undelivered, since is not None)) != 1:
        raise click.UsageError("give exactly one of SYNC_ID, --all-undelivered or --since")
    if partitions and since is None:
        raise click.UsageError("--partitions needs --since DATE")
    if sync_id is not None and not is_valid_id(sync_id):
        raise click.BadParameter("not a valid sync id", param_hint="SYNC_ID")
    since_ms = None if since is None else parse_time(since, "--since")
    fw = _forwarder(with_airflow=False)
    if since_ms is not None:
        if not fw.settings.airflow_url:
            raise CliError(
                "forwarding is off: set FIVETRAN_EVENTS_AIRFLOW_URL "
                "(the workers' Airflow) before replaying the past",
                ExitCode.USAGE,
            )
        if connector_id is not None:
            raise click.UsageError("--connector does not apply to --since")
        if partitions:
            _replay_partitions(fw, since_ms, as_json)
            return
        created, replayed, delivered = Replayer.of(fw).forward_since(since_ms)
        if as_json:
            emit_json(
                {
                    "since": iso(since_ms),
                    "created": len(created),
                    "replayed": len(replayed),
                    "already_delivered": delivered,
                }
            )
            return
        echo(
            f"queued {len(created)} new and {len(replayed)} replayed "
            f"deliver{'y' if len(created) + len(replayed) == 1 else 'ies'} since "
            f"{iso(since_ms)}" + (f" ({delivered} already delivered)" if delivered else "")
        )
        return
    if all_undelivered:
        ids = [
            i
            for i in fw.store.given_up()
            if connector_id is None or i.split(":")[0] == connector_id
        ]
    else:
        assert sync_id is not None
        ids = Replayer.of(fw).deliveries_of_sync(sync_id, connector_id)
        if not ids:
            raise CliError(
                f"no deliveries recorded for sync '{sync_id}': see `fivetran-events deliveries`",
                ExitCode.USAGE,
            )
    done = Replayer.of(fw).replay(ids)
    if as_json:
        emit_json({"replayed": len(done), "already_delivered": len(ids) - len(done)})
        return
    echo(
        f"replayed {len(done)} deliver{'y' if len(done) == 1 else 'ies'}"
        + (f" ({len(ids) - len(done)} already delivered)" if len(ids) > len(done) else "")
    )


@click.group()
def datasets() -> None:
    """Dataset URIs of the connectors, as Airflow sees them."""


@datasets.command()
@json_option
@clean_errors
def check(as_json: bool) -> None:
    """List the URIs the mapping and the recorded connectors produce, and whether Airflow
    knows each; with table granularity, the table URIs and the DAGs scheduled on them.

    Exit 1 if a connector's URI is missing (a table no DAG reads is not missing); 4 or 5
    if Airflow, Redis or Fivetran cannot be reached or refuse, never "missing".
    """
    settings = load_settings()
    fw = build_forwarder(settings, with_airflow=True)
    assert fw.airflow is not None
    reader = HistoryReader(fw.redis, settings.key_prefix, settings.max_sync_duration_ms)
    recorded = {c["connector_id"]: c for c in reader.connectors()}
    rows: list[dict[str, Any]] = []
    for cid in sorted(set(recorded) | set(fw.enqueuer.uri_map.mapped_connectors())):
        meta = recorded.get(cid, {})
        if settings.asset_granularity != "table":
            for uri in fw.enqueuer.uri_map.uris(
                cid, meta.get("connector_name"), meta.get("connector_type"), meta.get("group_id")
            ):
                known = fw.airflow.known(uri)  # errors propagate: exit 4 or 5, not "missing"
                rows.append(
                    {
                        "connector_id": cid,
                        "uri": uri,
                        "recorded": cid in recorded,
                        "known_to_airflow": known,
                    }
                )
        if settings.asset_granularity != "connector" and cid in recorded:
            rows += table_rows(fw, cid, meta.get("group_id"))
    if as_json:
        emit_json({"datasets": rows})
    else:
        table(
            [
                (
                    r["connector_id"],
                    "ok" if r["known_to_airflow"] else ("-" if "table" in r else "MISSING"),
                    r["uri"],
                    ", ".join(r.get("dags", [])),
                )
                for r in rows
            ],
            ("CONNECTOR", "AIRFLOW", "URI", "DAGS"),
        )
    if not all(r["known_to_airflow"] for r in rows if "table" not in r):
        exit_with(ExitCode.FAILED)


def table_rows(fw: Forwarder, cid: str, group_id: str | None) -> list[dict[str, Any]]:
    """A connector's table URIs (refreshed when due) and the DAGs scheduled on each."""
    prefix = fw.settings.key_prefix
    tables = destination_tables(fw.redis, prefix, cid)
    if fw.fivetran is not None and (tables is None or not tables_fresh(fw.redis, prefix, cid)):
        tables = refresh(fw.redis, fw.settings, fw.fivetran, cid, group_id)
    if not tables:
        return []
    assert fw.airflow is not None
    assets = fw.airflow.assets_under(common_prefix([t.uri for t in tables]))
    return [
        {
            "connector_id": cid,
            "uri": t.uri,
            "table": f"{t.schema}.{t.table}",
            "recorded": True,
            "known_to_airflow": t.uri in assets,
            "dags": assets.get(t.uri, []),
        }
        for t in tables
    ]


COMMANDS: list[click.Command] = [worker, deliveries, replay, datasets]


def _replay_partitions(fw: Forwarder, since_ms: int, as_json: bool) -> None:
    """Queue the partitioned events since ``since_ms`` and say which keys they are."""
    if fw.partitioner is None:
        raise CliError(
            "partitions are off: set FIVETRAN_EVENTS_PARTITION_GRAIN (hour or day, as the "
            "workers have it) before replaying them",
            ExitCode.USAGE,
        )
    out = Replayer.of(fw).forward_partitions_since(since_ms)
    if as_json:
        emit_json(
            {
                "since": iso(since_ms),
                "created": len(out.created),
                "replayed": len(out.replayed),
                "already_delivered": out.delivered,
                "keys": out.keys,
            }
        )
        return
    queued = len(out.created) + len(out.replayed)
    echo(
        f"queued {len(out.created)} new and {len(out.replayed)} replayed partitioned "
        f"deliver{'y' if queued == 1 else 'ies'} since {iso(since_ms)}"
        + (f" ({out.delivered} already delivered)" if out.delivered else "")
    )
    for cid, keys in sorted(out.keys.items()):
        echo(f"  {cid}: {len(keys)} keys, {min(keys)} to {max(keys)}")
