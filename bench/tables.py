"""What one asset per table costs: Redis bytes a sync and calls a sync, against the connector.

A connector with ``--tables`` enabled tables (2,000 by default) in a Postgres destination
(the Fivetran stand-in's schema configuration and destination) syncs ``--syncs`` times
under each granularity, in a redis-server of its own, flushed between them; the Airflow 2
stand-in knows ``--consumed`` of the tables as assets (a DAG reads them) and the
connector's asset. Per sync, the bench reports:

- Redis bytes at the webhook's write (``INFO used_memory`` before and after the record
  scripts: the history and the deliveries, before any worker ran);
- Redis bytes once a burst worker delivered everything; of those, the delivery records,
  and of those the ones kept the keep time (72 h: a delivered table's record goes after
  an hour, RQ's jobs and results after 300 s);
- POSTs to Airflow, listings of Airflow's assets, calls to Fivetran.

The connector granularity is the same-run baseline; every table figure is printed as a
ratio to it. The table list's cache is one string per connector, not per sync, and is
reported on its own.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fivetran_events import HistoryWriter, Settings  # noqa: E402
from fivetran_events.destinations import name_table  # noqa: E402
from fivetran_events.keys import tables_key  # noqa: E402
from fivetran_events.model import Event, EventKind  # noqa: E402
from testkit.airflow2_standin import Airflow2StandIn, running_airflow2_standin  # noqa: E402
from testkit.fivetran_api import FivetranStandIn, serving  # noqa: E402
from testkit.own_redis import own_redis  # noqa: E402
from webhook_app.state import State  # noqa: E402
from webhook_app.worker.build import build_forwarder  # noqa: E402
from webhook_app.worker.rq_worker import ForwardingWorker  # noqa: E402

CID, GROUP, PREFIX = "big_connector", "grp", "fte:"
PG = {"host": "wh.example.com", "port": 5432, "database": "analytics"}


def sync_end(n: int, when_ms: int) -> Event:
    created = datetime.fromtimestamp(when_ms / 1000, tz=timezone.utc)
    return Event(
        kind=EventKind.SYNC_END,
        event="sync_end",
        created=created,
        connector_id=CID,
        connector_name="big",
        connector_type="postgres",
        group_id=GROUP,
        sync_id=str(uuid.UUID(int=n + 1)),
        status="SUCCESSFUL",
    )


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def run(
    granularity: str,
    url: str,
    fivetran: FivetranStandIn,
    airflow: Airflow2StandIn,
    syncs: int,
) -> dict[str, float]:
    client = redis.Redis.from_url(url)
    client.flushall()
    settings = Settings.model_validate(
        {
            "redis_url": url,
            "key_prefix": PREFIX,
            "airflow_url": airflow.url,
            "airflow_username": airflow.username,
            "airflow_password": airflow.password,
            "asset_granularity": granularity,
            "fivetran_api_url": fivetran.url,
            "fivetran_api_key": fivetran.api_key,
            "fivetran_api_secret": fivetran.api_secret,
        }
    )
    state = State.from_settings(settings)
    writer = HistoryWriter(client, PREFIX, settings.retention_ms)
    fw = build_forwarder(settings)
    posts0, listings0, calls0 = len(airflow.posts), airflow.listings, fivetran.total_calls
    # One sync first, so the table list is cached and Airflow's asset ids are known
    # before measuring: a steady state, not a cold start.
    now = int(time.time() * 1000) - 3_600_000
    writer.record(sync_end(0, now), on_success=state.on_success)
    fw.sweep()
    ForwardingWorker(fw).work(burst=True, with_scheduler=False)
    cache = client.memory_usage(tables_key(PREFIX, CID)) or 0
    posts0, listings0, calls0 = len(airflow.posts), airflow.listings, fivetran.total_calls
    before = used(client)
    for n in range(1, syncs + 1):
        writer.record(sync_end(n, now + n * 60_000), on_success=state.on_success)
    at_write = used(client) - before
    started = time.perf_counter()
    fw.sweep()
    ForwardingWorker(fw).work(burst=True, with_scheduler=False)
    took = time.perf_counter() - started
    delivered = used(client) - before
    # The delivery records: all of them, and those that stay the keep time (72 h; a
    # delivered table's record goes after an hour, RQ's jobs and results after 300 s).
    records = kept = 0
    for k in client.scan_iter(f"{PREFIX}fwd:d:*", count=1000):
        size = client.memory_usage(k, samples=0) or 0
        records += size
        if client.pttl(k) > 2 * 3_600_000:
            kept += size
    client.close()
    return {
        "write_bytes": at_write / syncs,
        "delivered_bytes": delivered / syncs,
        "record_bytes": records / (syncs + 1),
        "kept_bytes": kept / (syncs + 1),
        "posts": (len(airflow.posts) - posts0) / syncs,
        "listings": (airflow.listings - listings0) / syncs,
        "fivetran_calls": (fivetran.total_calls - calls0) / syncs,
        "worker_s": took / syncs,
        "cache_bytes": cache,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tables", type=int, default=2000)
    parser.add_argument("--consumed", type=int, default=20, help="tables a DAG reads")
    parser.add_argument("--syncs", type=int, default=20)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    names = [f"t{n:05d}" for n in range(args.tables)]
    with (
        tempfile.TemporaryDirectory(prefix="fte-tables-") as tmp,
        own_redis(Path(tmp) / "redis") as server,
        running_airflow2_standin() as airflow,
        serving(FivetranStandIn()) as fivetran,
    ):
        fivetran.connector(CID, group_id=GROUP)
        fivetran.tables(CID, {"app": names})
        fivetran.destination(GROUP, "postgres_warehouse", **PG)
        airflow.add_dataset(f"fivetran://connector/{CID}")
        for t in names[: args.consumed]:
            airflow.add_dataset(name_table("postgres_warehouse", PG, "app", t).uri)
        base = run("connector", server.url, fivetran, airflow, args.syncs)
        table = run("table", server.url, fivetran, airflow, args.syncs)
    print(
        f"{args.tables:,} enabled tables, {args.consumed:,} with an asset in Airflow, "
        f"{args.syncs} syncs each; per sync:"
    )
    rows = [
        ("Redis bytes at the webhook's write", "write_bytes"),
        ("Redis bytes once delivered", "delivered_bytes"),
        ("  of which delivery records", "record_bytes"),
        ("  of which kept 72 h", "kept_bytes"),
        ("POSTs to Airflow", "posts"),
        ("asset listings (GET)", "listings"),
        ("calls to Fivetran", "fivetran_calls"),
        ("worker seconds", "worker_s"),
    ]
    print(f"  {'':38} {'connector':>11} {'table':>11} {'ratio':>7}")
    for label, field in rows:
        b, tb = base[field], table[field]
        ratio = f"{tb / b:7.2f}" if b else "      -"
        print(f"  {label:38} {b:11,.1f} {tb:11,.1f} {ratio}")
    print(f"  table list cache, once per connector: {table['cache_bytes']:,} bytes")


if __name__ == "__main__":
    main()
