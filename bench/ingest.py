"""Benchmark webhook ingestion against a trivial POST endpoint on the same server.

Starts its own redis-server (AOF everysec) and gunicorn on 127.0.0.1, drives a bounded
load of signed ``sync_end`` deliveries, and in the same run the same load against a
trivial endpoint of the same app. Prints events/s of both, their ratio, p50/p99 latency,
Redis bytes per recorded sync, and checks that every acknowledged delivery was recorded
exactly once. Absolute numbers mean little on a shared machine; the ratio is the figure.

The load runs in rounds, trivial and webhook in turn (trivial first and last), and the
ratio is the median over rounds of each webhook round against the trivial rounds on
either side of it: a shared machine's speed drifts over seconds, and one long phase of
each measured the drift as much as the code.

    .venv/bin/python -m bench.ingest [--deliveries 4000] [--clients 8] [--workers 5]
                                     [--rounds 5]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import cast

import redis

from fivetran_events.keys import ConnectorKeys
from fivetran_events.signature import SIGNATURE_HEADER, sign
from fivetran_events.timeutil import iso, now_ms
from webhook_app.cli import DEFAULT_WORKERS

from ._servers import start_gunicorn, start_redis, stop_group

SECRET = "bench-secret"
CONNECTORS = 20
PREFIX = "bench:"


def make_bodies(n: int) -> list[bytes]:
    t = now_ms()
    return [
        json.dumps(
            {
                "event": "sync_end",
                "created": iso(t - i),
                "connector_type": "postgres",
                "connector_id": f"conn_{i % CONNECTORS}",
                "connector_name": f"pg_{i % CONNECTORS}",
                "sync_id": str(uuid.uuid4()),
                "destination_group_id": "bench_group",
                "data": {"status": "SUCCESSFUL"},
            },
            separators=(",", ":"),
        ).encode()
        for i in range(n)
    ]


def drive(args: tuple[str, str, list[bytes]]) -> tuple[list[float], list[bytes], int]:
    """POST each body over one keep-alive connection; return latencies, acked bodies, errors."""
    base, path, bodies = args
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    latencies, acked, errors = [], [], 0
    for body in bodies:
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(body, SECRET)}
        t0 = time.perf_counter()
        try:
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            errors += 1
            conn.close()
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            continue
        latencies.append(time.perf_counter() - t0)
        if resp.status == 200 and json.loads(data).get("status") in ("recorded", "ok"):
            acked.append(body)
        else:
            errors += 1
    conn.close()
    return latencies, acked, errors


def phase(
    pool: ProcessPoolExecutor, base: str, path: str, bodies: list[bytes], clients: int
) -> dict[str, object]:
    slices = [(base, path, bodies[i::clients]) for i in range(clients)]
    t0 = time.perf_counter()
    results = list(pool.map(drive, slices))
    wall = time.perf_counter() - t0
    lat = sorted(x for r in results for x in r[0])
    acked = [b for r in results for b in r[1]]
    errors = sum(r[2] for r in results)
    return {
        "rate": len(acked) / wall,
        "p50": lat[len(lat) // 2] * 1000,
        "p99": lat[int(len(lat) * 0.99) - 1] * 1000,
        "acked": acked,
        "errors": errors,
        "wall": wall,
        "latencies": lat,
    }


def merge(rounds: list[dict[str, object]]) -> dict[str, object]:
    """Combine rounds of one endpoint: overall rate, latency percentiles over all requests."""
    lat = sorted(x for r in rounds for x in r["latencies"])  # type: ignore[attr-defined]
    acked = [b for r in rounds for b in r["acked"]]  # type: ignore[attr-defined]
    wall = sum(r["wall"] for r in rounds)  # type: ignore[misc]
    return {
        "rate": len(acked) / wall,
        "p50": lat[len(lat) // 2] * 1000,
        "p99": lat[int(len(lat) * 0.99) - 1] * 1000,
        "acked": acked,
        "errors": sum(cast(int, r["errors"]) for r in rounds),
        "wall": wall,
    }


def verify(client: redis.Redis, acked: list[bytes]) -> str:
    """Check every acknowledged delivery is in the history exactly once, with its job."""
    ok_members = 0
    for c in range(CONNECTORS):
        keys = ConnectorKeys(PREFIX, f"conn_{c}")
        ok_members += client.zcard(keys.ok)
    jobs = client.llen("rq:queue:fivetran-events")
    ids = [json.loads(b)["sync_id"] for b in acked]
    if len(set(ids)) != len(ids):
        return "FAILED: duplicate acknowledgements"
    if ok_members != len(acked) or jobs != len(acked):
        return f"FAILED: {len(acked)} acked, {ok_members} recorded, {jobs} jobs"
    return f"ok ({len(acked)} acked = {ok_members} recorded = {jobs} jobs)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deliveries", type=int, default=4000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help="gunicorn workers for both endpoints (default: as `serve`)",
    )
    ap.add_argument(
        "--rounds", type=int, default=5, help="webhook rounds, each between two trivial rounds"
    )
    a = ap.parse_args()
    if not 100 <= a.deliveries <= 100_000:
        ap.error("--deliveries must be between 100 and 100000")
    if not 1 <= a.rounds <= a.deliveries // 100:
        ap.error("--rounds must be between 1 and deliveries/100")

    with tempfile.TemporaryDirectory(prefix="fte-bench-") as tmp:
        redis_proc, url = start_redis(Path(tmp))
        # Forwarding on, so each delivery also queues its job (the bench never calls Airflow).
        env = {
            "FIVETRAN_EVENTS_REDIS_URL": url,
            "FIVETRAN_EVENTS_WEBHOOK_SECRETS": SECRET,
            "FIVETRAN_EVENTS_KEY_PREFIX": PREFIX,
            "FIVETRAN_EVENTS_AIRFLOW_URL": "http://127.0.0.1:9",
        }
        gunicorn, base = start_gunicorn("bench._app:app", env, a.workers)
        client = redis.Redis.from_url(url)
        try:
            bodies = make_bodies(a.deliveries)
            size = -(-a.deliveries // a.rounds)
            chunks = [bodies[i : i + size] for i in range(0, a.deliveries, size)]
            noops, hooks = [], []
            with ProcessPoolExecutor(a.clients) as pool:
                phase(pool, base, "/bench/noop", bodies[:200], a.clients)  # warm up
                before = client.info("memory")["used_memory"]  # the noop writes nothing
                for chunk in chunks:
                    noops.append(phase(pool, base, "/bench/noop", chunk, a.clients))
                    hooks.append(phase(pool, base, "/webhooks/fivetran", chunk, a.clients))
                noops.append(phase(pool, base, "/bench/noop", chunks[-1], a.clients))
                after = client.info("memory")["used_memory"]
            hook = merge(hooks)
            history_bytes = sum(
                client.memory_usage(k) or 0 for k in client.scan_iter(f"{PREFIX}*", count=1000)
            )
            check = verify(client, hook["acked"])  # type: ignore[arg-type]
        finally:
            stop_group(gunicorn, timeout=15)
            stop_group(redis_proc, timeout=15)

    ratios = [
        h["rate"] / ((before_["rate"] + after_["rate"]) / 2)  # type: ignore[operator]
        for h, before_, after_ in zip(hooks, noops, noops[1:], strict=False)
    ]
    n = len(hook["acked"])  # type: ignore[arg-type]
    print(
        f"deliveries={a.deliveries} clients={a.clients} gunicorn_workers={a.workers} "
        f"rounds={len(hooks)}"
    )
    for name, r in (("trivial POST", merge(noops)), ("webhook sync_end", hook)):
        print(
            f"{name:18} {r['rate']:8.0f} events/s  p50 {r['p50']:6.2f} ms  "
            f"p99 {r['p99']:6.2f} ms  errors {r['errors']}"
        )
    print(
        f"ratio webhook/trivial: {statistics.median(ratios):.2f} (goal >= 0.4; median of "
        f"{len(ratios)} rounds, {min(ratios):.2f}-{max(ratios):.2f})"
    )
    print(
        f"Redis bytes per recorded sync: {(after - before) / max(n, 1):.0f} in all "
        f"(history + RQ job), {history_bytes / max(n, 1):.0f} for the history alone"
    )
    print(f"exactly-once check: {check}")
    return 0 if check.startswith("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
