"""Measure ``fivetran-events import``: LOG rows a second, and the bytes a sync it leaves.

Writes a JSON Lines export of a LOG table (``--rows`` rows, 10^6 by default: each sync's
``sync_start`` and ``sync_end`` as the day-one export queries select them, Snowflake's
upper-case column names, ``time_stamp`` without a zone) in a temporary directory, from
the very syncs ``bench/storage.py`` writes (UUID sync ids, about 1% failed with a
reason, durations of 30 s to 45 min, spread over 800 days). Then, each into a
redis-server of its own on 127.0.0.1:

- the import: ``python -m webhook_app import --from FILE --json`` as a user runs it,
  timed from start to exit (reading, parsing and checking each row, writing);
- the baseline, the same syncs as the webhook's writer records them (the record script
  pipelined, ``history/writer.py``): what the history costs when the webhook delivered it.

It prints rows a second and the ratio import/baseline, and the bytes a sync of each
(``INFO used_memory``'s delta and ``MEMORY USAGE`` summed per key family, as
``bench/storage.py``), with the ratio. Run: ``python -m bench.import_log [--rows 100000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._history import load as load_many  # noqa: E402
from bench.storage import DAY_MS, RETENTION_DAYS, events, measure  # noqa: E402
from fivetran_events.model import Event  # noqa: E402
from fivetran_events.timeutil import from_ms, now_ms  # noqa: E402
from testkit.own_redis import own_redis  # noqa: E402

PREFIX = "fte:"
#: The longest the import may take (the goal is 2 minutes for 10^6 rows).
IMPORT_TIMEOUT_S = 1200


def log_row(event: Event, n: int) -> dict[str, object]:
    """``event`` as a row of Snowflake's LOG table (upper-case names, naive UTC time)."""
    data = None
    if event.status is not None:
        body = {"status": event.status}
        if event.reason:
            body["reason"] = event.reason
        data = json.dumps(body)
    return {
        "ID": f"log-{n}",
        "TIME_STAMP": from_ms(event.created_ms).strftime("%Y-%m-%d %H:%M:%S.%f"),
        "CONNECTION_ID": event.connector_id,
        "EVENT": "SEVERE" if event.is_failure else "INFO",
        "MESSAGE_EVENT": event.event,
        "MESSAGE_DATA": data,
        "SYNC_ID": event.sync_id,
        "TRANSFORMATION_ID": None,
        "_FIVETRAN_SYNCED": from_ms(event.created_ms + 3_600_000).strftime("%Y-%m-%d %H:%M:%S.%f"),
    }


def write_export(path: Path, syncs: int, connectors: int, now: int) -> int:
    with path.open("w", encoding="utf-8") as f:
        for n, event in enumerate(events(syncs, connectors, now)):
            f.write(json.dumps(log_row(event, n), separators=(",", ":")) + "\n")
    return path.stat().st_size


def run_import(url: str, path: Path) -> tuple[float, dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIVETRAN_EVENTS_")}
    env.update({"FIVETRAN_EVENTS_REDIS_URL": url, "FIVETRAN_EVENTS_KEY_PREFIX": PREFIX})
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "webhook_app", "import", "--from", str(path), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=IMPORT_TIMEOUT_S,
        check=False,
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"import failed ({done.returncode}): {done.stderr.strip()}")
    return took, json.loads(done.stdout)


def bytes_per_sync(client: redis.Redis, before: int, syncs: int) -> tuple[float, float]:
    used = int(client.info("memory")["used_memory"]) - before
    sizes = measure(client)
    return used / syncs, sum(b for b, _ in sizes.values()) / syncs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="LOG rows (two a sync)")
    p.add_argument("--connectors", type=int, default=1000)
    args = p.parse_args()
    syncs = args.rows // 2
    now = now_ms()
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        work = Path(tmp)
        export = work / "log.jsonl"
        t0 = time.perf_counter()
        size = write_export(export, syncs, args.connectors, now)
        print(
            f"import_log: {2 * syncs:,} LOG rows ({syncs:,} syncs, {args.connectors:,} "
            f"connectors, {RETENTION_DAYS} d) written as JSON Lines, {size / 1e6:.0f} MB, "
            f"in {time.perf_counter() - t0:.0f} s"
        )
        with own_redis(work / "import") as server:
            client = server.client()
            before = int(client.info("memory")["used_memory"])
            took, summary = run_import(server.url, export)
            imported = bytes_per_sync(client, before, syncs)
        with own_redis(work / "baseline") as server:
            client = server.client()
            before = int(client.info("memory")["used_memory"])
            started = time.perf_counter()
            load_many(
                client,
                PREFIX,
                events(syncs, args.connectors, now),
                RETENTION_DAYS * DAY_MS,
                now=now,
            )
            base_took = time.perf_counter() - started
            webhook = bytes_per_sync(client, before, syncs)
    rows = 2 * syncs
    print(
        f"   import: {took:.1f} s, {rows / took:,.0f} rows/s (goal: 10^6 rows in 120 s); "
        f"summary {json.dumps(summary)}"
    )
    print(
        f"   baseline, the webhook's writer (pipelined record script, no parsing): "
        f"{base_took:.1f} s, {rows / base_took:,.0f} events/s; import/baseline "
        f"{(rows / took) / (rows / base_took):.2f}"
    )
    print(f"   {'bytes a sync':<28} {'imported':>10} {'webhook':>10} {'ratio':>7}")
    for name, i, w in (
        ("INFO used_memory delta", imported[0], webhook[0]),
        ("MEMORY USAGE of the keys", imported[1], webhook[1]),
    ):
        print(f"   {name:<28} {i:>10.1f} {w:>10.1f} {i / w:>7.3f}")


if __name__ == "__main__":
    main()
