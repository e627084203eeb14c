"""Measure the Redis memory the history costs per recorded sync; print a table.

Writes ``--syncs`` syncs (10^6 by default; a ``sync_start`` and a ``sync_end`` each,
about 1% FAILED with a realistic reason, a few RESCHEDULED, UUID sync ids) over
``--connectors`` connectors named like Fivetran's (``adverb_noun``), spread evenly over
the retention window up to now, into a redis-server of its own on 127.0.0.1 (default
config: the listpack limits users run with). Then it reports the bytes per sync from
``INFO memory``'s ``used_memory`` before and after, and from ``MEMORY USAGE`` summed per
key family, and a sizing table (connectors x syncs a day x retention -> memory) next to
layout v1's figure.

Then the all-in part (bench/storage_forwarding.py): ``--sample`` syncs (5,000) go through
the webhook's real write with forwarding on, a real worker delivers them to the Airflow 2
stand-in, and the bench waits out the expiries (delivered records kept 60 s instead of
72 h); it prints per key family the bytes a sync at write, how the family lives (rule and
measured TTL) and the bytes a sync after a week, against the 300-byte goal. RQ's fixed
300 s result TTL is read with PTTL (``--wait-rq`` waits it out too).

``--writer bulk`` (default) loads through ``bench._history.load`` (the write
script itself, pipelined); ``--writer record`` calls ``HistoryWriter.record`` once per
event (slower; it also runs against older versions of the package, which is how the v1
figure was taken). Run: ``python -m bench.storage [--syncs 100000]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.storage_forwarding import (  # noqa: E402 (after the path insertion)
    SampleResult,
    family,
    run_sample,
    sample_settings,
)
from fivetran_events.deliveries import Lifetimes  # noqa: E402
from fivetran_events.model import Event, EventKind  # noqa: E402
from fivetran_events.settings import Settings  # noqa: E402
from testkit.airflow2_standin import running_airflow2_standin  # noqa: E402
from testkit.own_redis import own_redis  # noqa: E402
from webhook_app.forwarding.sweeper import RESULT_TTL  # noqa: E402

UTC = timezone.utc
PREFIX = "fte:"
DAY_MS = 86_400_000
RETENTION_DAYS = 800
#: Layout v1's bytes per sync, measured with this bench (``--writer record --syncs
#: 100000 --connectors 100``, so 1,000 syncs a connector as by default) on main before
#: layout v2: INFO used_memory's delta (MEMORY USAGE of its keys: 1,100).
V1_BYTES_PER_SYNC = 1_158
#: What v1 kept of a delivered sync besides the history, for 800 days: its record hash
#: (1,840 B), its sync's set (232 B) and its fwd:all entry (139 B), MEMORY USAGE on main
#: before layout v2. v1 after a week: both.
V1_DELIVERY_BYTES = 1_840 + 232 + 139
V1_AFTER_WEEK = V1_BYTES_PER_SYNC + V1_DELIVERY_BYTES
#: The sample's keep time for delivered records (72 h by default; a setting).
SAMPLE_KEEP_S = 60.0
#: How the history's families live (fivetran_events.history).
HISTORY_RULES = {
    "h:*:seen": "dedup marks: trimmed 72 h behind the event written",
    "h:*:starts": "trimmed 72 h behind the event written",
    "h:*:running": "until the sync's end",
    "connectors": "one entry a connector, while it has history",
}
#: How forwarding's families live (webhook_app/forwarding); the measured TTLs follow.
FORWARDING_RULES = {
    "fwd:d:*": "delivered: kept 72 h",
    "fwd:s:*": "expires with its last record",
    "fwd:all": "trimmed by age at each creation",
    "rq:job:*": "RESULT_TTL 300 s after it ran",
    "rq:results:*": "RESULT_TTL 300 s",
}

ADVERBS = ("assimilate", "bravely", "calmly", "deftly", "eagerly", "fairly", "gladly")
NOUNS = ("seem", "otter", "harbor", "lantern", "meadow", "quartz", "saddle", "thicket")
REASONS = (
    "Connection timed out while reading from the source database",
    "ERROR: permission denied for table orders (SQLSTATE 42501)",
    "Destination warehouse is suspended: resume it and retry",
    "OAuth token expired; re-authorize the connector",
    "Rate limit exceeded on the source API (HTTP 429) after 12 retries",
)
SHAPES = (  # connectors, syncs a day, retention days
    (50, 24, 800),
    (200, 24, 800),
    (1000, 24, 800),
    (200, 96, 365),
    (1000, 4, 800),
)


def connector_ids(n: int, rng: random.Random) -> list[str]:
    """Fivetran-style ids, unique: adverb_noun plus a counter past the first round."""
    out = []
    for i in range(n):
        base = f"{ADVERBS[i % len(ADVERBS)]}_{NOUNS[(i // len(ADVERBS)) % len(NOUNS)]}"
        out.append(base if i < len(ADVERBS) * len(NOUNS) else f"{base}{i}")
    rng.shuffle(out)
    return out


def events(
    syncs: int, connectors: int, now: int, seed: int = 7, span: int = (RETENTION_DAYS - 1) * DAY_MS
) -> Iterator[Event]:
    """Yield every sync's start and end, in time order per connector, over ``span`` ms."""
    rng = random.Random(seed)
    ids = connector_ids(connectors, rng)
    per = syncs // connectors
    for c, cid in enumerate(ids):
        n = per + (1 if c < syncs - per * connectors else 0)
        step = span // max(n, 1)
        for i in range(n):
            end = now - span + i * step + rng.randint(0, step // 2)
            start = end - rng.randint(30_000, 45 * 60_000)
            sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            roll = rng.random()
            status, reason = "SUCCESSFUL", None
            if roll < 0.01:
                status, reason = "FAILURE_WITH_TASK", rng.choice(REASONS)
            elif roll < 0.012:
                status = "RESCHEDULED"
            common: dict[str, Any] = {
                "connector_id": cid,
                "connector_name": f"{cid}_prod",
                "connector_type": "google_cloud_postgresql",
                "group_id": "inappropriate_implode",
                "sync_id": sid,
            }
            yield Event(
                kind=EventKind.SYNC_START,
                event="sync_start",
                created=datetime.fromtimestamp(start / 1000, UTC),
                **common,
            )
            yield Event(
                kind=EventKind.SYNC_END,
                event="sync_end",
                created=datetime.fromtimestamp(end / 1000, UTC),
                status=status,
                reason=reason,
                **common,
            )


def measure(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Sum MEMORY USAGE (every element sampled) and count keys per family."""
    sizes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    keys = list(client.scan_iter(match=f"{PREFIX}*", count=1000))
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.memory_usage(k, samples=0)
    for k, used in zip(keys, pipe.execute(), strict=True):
        entry = sizes[family(k, PREFIX)]
        entry[0] += int(used or 0)
        entry[1] += 1
    return {f: (b, n) for f, (b, n) in sizes.items()}


def load(client: redis.Redis, how: str, syncs: int, connectors: int, now: int) -> float:
    started = time.perf_counter()
    stream = events(syncs, connectors, now)
    retention_ms = RETENTION_DAYS * DAY_MS
    if how == "bulk":
        from bench._history import load as load_many

        load_many(client, PREFIX, stream, retention_ms, now=now)
    else:
        from fivetran_events import HistoryWriter

        writer = HistoryWriter(client, PREFIX, retention_ms)
        for event in stream:
            writer.record(event, now=now)
    return time.perf_counter() - started


def report(syncs: int, used_delta: int, sizes: dict[str, tuple[int, int]], took: float) -> None:
    total = sum(b for b, _ in sizes.values())
    print(
        f"storage: {syncs:,} syncs ({2 * syncs:,} events) over {RETENTION_DAYS} d loaded in "
        f"{took:.0f} s; redis-server default config (listpack limits 128 entries / 64 bytes)"
    )
    print(f"   {'key family':<22} {'keys':>7} {'bytes':>13} {'bytes/sync':>11}")
    for name, (b, n) in sorted(sizes.items(), key=lambda item: -item[1][0]):
        print(f"   {name:<22} {n:>7,} {b:>13,} {b / syncs:>11.1f}")
    print(f"   {'all (MEMORY USAGE)':<22} {'':>7} {total:>13,} {total / syncs:>11.1f}")
    delta_row = f"{used_delta:>13,} {used_delta / syncs:>11.1f}"
    print(f"   {'INFO used_memory delta':<22} {'':>7} {delta_row}")


def all_in(
    syncs: int, used_delta: int, sizes: dict[str, tuple[int, int]], sample: SampleResult
) -> float:
    """Print every family's bytes a sync at write, how it lives, and after a week.

    History families after a week come from the full load (spread over the retention,
    so the 72 h sets hold what a steady stream leaves); the rest from the sample.
    Return the all-in INFO used_memory figure after a week, bytes a sync.
    """
    n = sample.syncs
    print(
        f"storage, all-in: a sample of {n:,} syncs written through the webhook's path "
        f"(HistoryWriter.record + State.on_success) and delivered by a ForwardingWorker "
        f"to the Airflow 2 stand-in (of {sample.successes:,} successes' deliveries: "
        f"{dict(sample.states)}) in {sample.took_s:.0f} s; "
        f"delivered records kept {SAMPLE_KEEP_S:.0f} s instead of 72 h; per sync, scaled "
        "from the sample (at write) and from the full load (history after a week)"
    )
    print(f"   {'family':<28} {'B/sync at write':>15}  {'lives':<58} {'B/sync after a week':>19}")
    total = 0.0
    names = sorted(set(sizes) | set(sample.at_write) | set(sample.after))
    for name in names:
        w = sample.at_write.get(name)
        at_write = f"{w.bytes / n:15.1f}" if w else f"{'-':>15}"
        if name in sizes or name in HISTORY_RULES:
            after = sizes.get(name, (0, 0))[0] / syncs
            lives = HISTORY_RULES.get(name, "retention (800 d)")
        else:
            fam = sample.delivered.get(name) or sample.after.get(name) or w
            assert fam is not None
            later = sample.after.get(name)
            after = later.after_week / n if later else 0.0
            rule = FORWARDING_RULES.get(name)
            lives = f"{rule}; {fam.lives()}" if rule else fam.lives()
        total += after
        print(f"   {name:<28} {at_write}  {lives:<58} {after:19.1f}")
    used = used_delta / syncs + sample.used_after / n
    left = sum(  # forwarding's leftovers; the history's are the full load's
        f.after_week for name, f in sample.after.items() if name not in sizes | HISTORY_RULES
    )
    print(f"   {'all after a week (MEMORY USAGE)':<104} {total:19.1f}")
    print(f"   {'all after a week (INFO used_memory)':<104} {used:19.1f}")
    how = "RQ's TTLs waited out" if sample.waited_rq else "less the keys whose TTL ends in a week"
    print(
        f"   INFO used_memory: the full load's delta per sync plus the sample's after the "
        f"expiries ({sample.used_after / n:.1f} B/sync: its history deleted, {how}; of it "
        "MEMORY STATS' keyspace hash tables then: "
        f"{sample.tables_after / n:.1f}); the sample at write: {sample.used_at_write / n:.0f} "
        "B/sync (history with 72 h sets full, records, indexes, RQ jobs). Goal: <= 300."
    )
    steady = sum(
        f.bytes / n * life_ms / (RETENTION_DAYS * DAY_MS)
        for name, f in sample.at_write.items()
        if (life_ms := steady_life_ms(name)) is not None
    )
    listing_h = Lifetimes.from_settings(Settings()).record_ttl_ms / 3_600_000
    print(
        "   a steady stream also holds the deliveries still young (records 72 h, listing "
        f"{listing_h:.0f} h, jobs 300 s, at default settings): "
        f"{steady:.1f} B per kept sync over {RETENTION_DAYS} d, at the sample's sizes"
    )
    # Sizing: the history as Redis allocates it, what forwarding leaves (MEMORY USAGE) and
    # the young deliveries; not the sample's hash tables (a constant of the deployment).
    return used_delta / syncs + left / n + steady


def steady_life_ms(name: str) -> int | None:
    """How long a forwarding family's share of a sync stays at default settings, if it goes."""
    settings = Settings()
    if name in ("fwd:d:*", "fwd:s:*"):
        return Lifetimes.from_settings(settings).keep_delivered_ms
    if name == "fwd:all":
        return Lifetimes.from_settings(settings).record_ttl_ms
    if name.startswith("rq:job:") or name.startswith("rq:results:"):
        return RESULT_TTL * 1000
    return None


def sizing(per_sync: float) -> None:
    print(
        f"   sizing: history (INFO used_memory) + forwarding left + young deliveries: "
        f"{per_sync:.0f} bytes/sync "
        f"(v1 {V1_AFTER_WEEK:,}: history {V1_BYTES_PER_SYNC:,} + delivered record "
        f"{V1_DELIVERY_BYTES:,}, kept 800 d)"
    )
    head = ("connectors", "syncs/day", "retention", "syncs", "v2", "v1")
    print("   {:>10} {:>9} {:>9} {:>14} {:>9} {:>9}".format(*head))
    for conns, per_day, days in SHAPES:
        k = conns * per_day * days
        print(
            f"   {conns:>10,} {per_day:>9} {days:>7} d {k:>14,} "
            f"{k * per_sync / 1e9:>6.1f} GB {k * V1_AFTER_WEEK / 1e9:>6.1f} GB"
        )


def forwarding_sample(args: argparse.Namespace, work: Path) -> SampleResult:
    """Run the forwarding sample in a redis-server of its own (storage_forwarding.py)."""
    with own_redis(work / "sample") as server, running_airflow2_standin() as airflow:
        now = int(time.time() * 1000)
        per = max(1, args.sample // args.connectors)
        n = per * min(args.connectors, args.sample)
        stream = list(events(n + 1, min(args.connectors, n), now - 600_000, span=3_000_000))
        settings = sample_settings(server.url, PREFIX, airflow, SAMPLE_KEEP_S)
        # Hold back the last success: written after the wait, its creation trims.
        end = max(i for i, e in enumerate(stream) if e.is_success)
        held = stream[end - 1 : end + 1]
        kept = stream[: end - 1] + stream[end + 1 :]
        return run_sample(settings, airflow, kept, held, wait_rq=args.wait_rq)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--syncs", type=int, default=10**6)
    parser.add_argument("--connectors", type=int, default=1000)
    parser.add_argument("--writer", choices=("bulk", "record"), default="bulk")
    parser.add_argument("--sample", type=int, default=5000, help="syncs forwarded (0: none)")
    parser.add_argument(
        "--wait-rq", action="store_true", help="wait out RQ's 300 s result TTL too (INFO)"
    )
    args = parser.parse_args()
    if args.syncs < args.connectors or args.connectors < 1:
        parser.error("--syncs must be at least --connectors, and both positive")
    with tempfile.TemporaryDirectory(prefix="fte-storage-") as tmp:
        work = Path(tmp)
        with own_redis(work / "redis") as server:
            client = redis.Redis.from_url(server.url)
            before = int(client.info("memory")["used_memory"])
            now = int(time.time() * 1000)
            took = load(client, args.writer, args.syncs, args.connectors, now)
            used_delta = int(client.info("memory")["used_memory"]) - before
            sizes = measure(client)
        report(args.syncs, used_delta, sizes, took)
        if args.sample:
            sample = forwarding_sample(args, work)
            sizing(all_in(args.syncs, used_delta, sizes, sample))


if __name__ == "__main__":
    main()
