"""Measure the Redis memory the history costs per recorded sync; print a table.

Writes ``--syncs`` syncs (10^6 by default; a ``sync_start`` and a ``sync_end`` each,
about 1% FAILED with a realistic reason, a few RESCHEDULED, UUID sync ids) over
``--connectors`` connectors named like Fivetran's (``adverb_noun``), spread evenly over
the retention window up to now, into a redis-server of its own on 127.0.0.1 (default
config: the listpack limits users run with). Then it reports the bytes per sync from
``INFO memory``'s ``used_memory`` before and after, and from ``MEMORY USAGE`` summed per
key family, and a sizing table (connectors x syncs a day x retention -> memory) next to
layout v1's figure.

``--writer bulk`` (default) loads through ``fivetran_events.history.bulk`` (the write
script itself, pipelined); ``--writer record`` calls ``HistoryWriter.record`` once per
event (slower; it also runs against older versions of the package, which is how the v1
figure was taken). Run: ``python -m bench.storage [--syncs 100000]``.
"""

from __future__ import annotations

import argparse
import random
import shutil
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

from bench._servers import start_redis, stop_group  # noqa: E402 (after the path insertion)
from fivetran_events.model import Event, EventKind  # noqa: E402

UTC = timezone.utc
PREFIX = "fte:"
DAY_MS = 86_400_000
RETENTION_DAYS = 800
#: Layout v1's bytes per sync, measured with this bench (``--writer record --syncs
#: 100000 --connectors 100``, so 1,000 syncs a connector as by default) on main before
#: layout v2: INFO used_memory's delta (MEMORY USAGE of its keys: 1,100).
V1_BYTES_PER_SYNC = 1_158

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


def events(syncs: int, connectors: int, now: int, seed: int = 7) -> Iterator[Event]:
    """Yield every sync's start and end, in time order per connector."""
    rng = random.Random(seed)
    ids = connector_ids(connectors, rng)
    per = syncs // connectors
    span = (RETENTION_DAYS - 1) * DAY_MS
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


def family(key: bytes) -> str:
    """Name a key's family: ``h:*:ok`` for history keys, the key itself otherwise."""
    text = key.decode()[len(PREFIX) :]
    parts = text.split(":")
    if len(parts) == 3:
        return f"{parts[0]}:*:{parts[2]}"
    return text


def measure(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Sum MEMORY USAGE (every element sampled) and count keys per family."""
    sizes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    keys = list(client.scan_iter(match=f"{PREFIX}*", count=1000))
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.memory_usage(k, samples=0)
    for k, used in zip(keys, pipe.execute(), strict=True):
        entry = sizes[family(k)]
        entry[0] += int(used or 0)
        entry[1] += 1
    return {f: (b, n) for f, (b, n) in sizes.items()}


def load(client: redis.Redis, how: str, syncs: int, connectors: int, now: int) -> float:
    started = time.perf_counter()
    stream = events(syncs, connectors, now)
    retention_ms = RETENTION_DAYS * DAY_MS
    if how == "bulk":
        from fivetran_events.history import bulk

        bulk.load(client, PREFIX, stream, retention_ms, now=now)
    else:
        from fivetran_events import HistoryWriter

        writer = HistoryWriter(client, PREFIX, retention_ms)
        for event in stream:
            writer.record(event, now=now)
    return time.perf_counter() - started


def report(
    syncs: int, used_delta: int, sizes: dict[str, tuple[int, int]], took: float, how: str
) -> None:
    total = sum(b for b, _ in sizes.values())
    per_sync = total / syncs
    print(
        f"storage: {syncs:,} syncs ({2 * syncs:,} events) loaded via {how} in {took:.0f} s; "
        "redis-server 7.0 default config (listpack limits 128 entries / 64 bytes)"
    )
    print(f"   {'key family':<22} {'keys':>7} {'bytes':>13} {'bytes/sync':>11}")
    for name, (b, n) in sorted(sizes.items(), key=lambda item: -item[1][0]):
        print(f"   {name:<22} {n:>7,} {b:>13,} {b / syncs:>11.1f}")
    print(f"   {'all (MEMORY USAGE)':<22} {'':>7} {total:>13,} {per_sync:>11.1f}")
    delta_row = f"{used_delta:>13,} {used_delta / syncs:>11.1f}"
    print(f"   {'INFO used_memory delta':<22} {'':>7} {delta_row}")
    print(
        "   counted: the history (h:*), the connectors hash, the short-lived sets (seen, "
        "starts: trimmed 72 h behind the event written, on one write in 16; running: "
        "until the sync's end). Not counted: fwd:* delivery records and RQ jobs (the webhook app's "
        "forwarding; their expiry is not measured here), pub/sub (nothing stored)."
    )


def sizing(per_sync: float) -> None:
    print(
        f"   sizing from INFO used_memory: {per_sync:.0f} bytes/sync (v1 {V1_BYTES_PER_SYNC:,}); "
        "history and metadata only"
    )
    head = ("connectors", "syncs/day", "retention", "syncs", "v2", "v1")
    print("   {:>10} {:>9} {:>9} {:>14} {:>9} {:>9}".format(*head))
    for conns, per_day, days in SHAPES:
        n = conns * per_day * days
        print(
            f"   {conns:>10,} {per_day:>9} {days:>7} d {n:>14,} "
            f"{n * per_sync / 1e9:>6.1f} GB {n * V1_BYTES_PER_SYNC / 1e9:>6.1f} GB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--syncs", type=int, default=10**6)
    parser.add_argument("--connectors", type=int, default=1000)
    parser.add_argument("--writer", choices=("bulk", "record"), default="bulk")
    args = parser.parse_args()
    if args.syncs < args.connectors or args.connectors < 1:
        parser.error("--syncs must be at least --connectors, and both positive")
    work = Path(tempfile.mkdtemp(prefix="fte-storage-"))
    proc, url = start_redis(work, appendonly=False)
    try:
        client = redis.Redis.from_url(url)
        before = int(client.info("memory")["used_memory"])
        now = int(time.time() * 1000)
        took = load(client, args.writer, args.syncs, args.connectors, now)
        used_delta = int(client.info("memory")["used_memory"]) - before
        report(args.syncs, used_delta, measure(client), took, args.writer)
        sizing(used_delta / args.syncs)  # what Redis allocated, its own overhead included
    finally:
        stop_group(proc, timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
