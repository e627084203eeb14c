"""Freshness at scale: reconcile's Fivetran calls and the /metrics scrape, 2,000 connectors.

Starts a redis-server and Fivetran's REST API stand-in of its own on 127.0.0.1 and records
one success per connector through the record script, twice, under two key prefixes. It
runs reconcile against the stand-in listing every connection with a schedule (hourly,
every 15 minutes, daily at a time, manual, paused) for one prefix, printing its Fivetran
calls by route. Then it scrapes the Redis gauges as ``/metrics`` does
(``RedisGauges.collect``) of both in turns: the reconciled one computes each connector's
due time and ``fivetran_events_connector_overdue_seconds``; the other, without
schedules, is the baseline (what a scrape read before #31). Each figure is the median of
``--rounds``; read the ratio. Run: ``python -m bench.freshness``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._history import load  # noqa: E402
from fivetran_events.fivetran_api import FivetranClient  # noqa: E402 (after the path insertion)
from fivetran_events.reconcile import reconcile  # noqa: E402
from testkit.fivetran_api import FivetranStandIn, serving  # noqa: E402
from testkit.own_redis import own_redis  # noqa: E402
from testkit.support import ev  # noqa: E402
from webhook_app.metrics import RedisGauges  # noqa: E402

PREFIX = "bench:"
#: The same connectors and successes, never reconciled: the scrape as it was before #31.
BEFORE = "before:"
RETENTION_MS = 800 * 86_400_000
#: (schedule_type, sync_frequency, daily_sync_time, paused), in turn over the connectors.
SCHEDULES = (
    ("auto", 60, None, False),
    ("auto", 15, None, False),
    ("auto", 1440, "03:00", False),
    ("manual", 360, None, False),
    ("auto", 360, None, True),
)


def scrape_ms(pairs: list[RedisGauges], rounds: int) -> list[float]:
    """The median scrape of each collector, measured in turns so load hits both alike."""
    times: list[list[float]] = [[] for _ in pairs]
    for gauges in pairs:
        list(gauges.collect())  # warm: the first scrape pays for imports and caches
    for _ in range(rounds):
        for i, gauges in enumerate(pairs):
            t0 = time.perf_counter()
            list(gauges.collect())
            times[i].append((time.perf_counter() - t0) * 1000)
    return [statistics.median(t) for t in times]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connectors", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    now = datetime.now(timezone.utc).replace(microsecond=0)
    ids = [f"bench_conn_{i:05d}" for i in range(args.connectors)]
    with tempfile.TemporaryDirectory() as tmp, own_redis(Path(tmp)) as server:
        client = server.client()
        ended = {cid: now - timedelta(minutes=5 + (i % 180)) for i, cid in enumerate(ids)}
        events = [ev(connector_id=cid, created=ended[cid], sync_id=f"s-{cid}") for cid in ids]
        for prefix in (PREFIX, BEFORE):
            load(client, prefix, events, RETENTION_MS)
        api = FivetranStandIn()
        for i, cid in enumerate(ids):
            kind, freq, daily, paused = SCHEDULES[i % len(SCHEDULES)]
            api.connector(
                cid,
                succeeded_at=ended[cid],
                schedule_type=kind,
                sync_frequency=freq,
                daily_sync_time=daily,
                paused=paused,
            )
        with serving(api), FivetranClient("key", "secret", api.url, backoff=0.01) as fivetran:
            t0 = time.perf_counter()
            outcome = reconcile(client, fivetran, PREFIX, RETENTION_MS, 3_600_000)
            took = time.perf_counter() - t0
        gauges = RedisGauges(client, PREFIX)
        after, before = scrape_ms([gauges, RedisGauges(client, BEFORE)], args.rounds)
        overdue = [m for m in gauges.collect() if m.name.endswith("connector_overdue_seconds")]
        series = len(overdue[0].samples) if overdue else 0
    print(f"{args.connectors} connectors, one success each; reconcile took {took:.2f} s")
    print(f"  Fivetran calls: {dict(sorted(api.calls.items()))}")
    print(f"  sync histories read: {outcome.sync_histories}; recorded: {len(outcome.recorded)}")
    print(f"  overdue series after reconcile: {series} (manual and paused have none)")
    print(
        f"scrape, median of {args.rounds}: before schedules {before:.1f} ms, after {after:.1f} ms"
    )
    print(f"  ratio after / before: x{after / before:.2f} (the goal: under x2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
