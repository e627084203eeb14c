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

Then a paced phase: new deliveries sent open-loop at half the trivial endpoint's measured
rate, each at its appointed time whether or not the ones before were answered, for a
bounded number of deliveries. Its latencies count from the appointed time, so a queue
building up shows in them. That is the acknowledgement latency Fivetran sees at a load
the server can carry.

gunicorn runs with deploy/gunicorn.conf.py (production's access log and metrics); the
servers' logs go to a file whose path is printed. Redis's CPU time and its per-call
times of the history's and the deliveries' scripts are printed for the webhook rounds.

    .venv/bin/python -m bench.ingest [--deliveries 4000] [--clients 8] [--workers 5]
                                     [--rounds 5] [--paced 2000] [--lineage]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import cast

import redis

from fivetran_events.keys import ConnectorKeys, deliveries_key, due_key, sweep_wake_key
from fivetran_events.model import SIGNATURE_HEADER, sign
from fivetran_events.settings import Settings
from fivetran_events.timeutil import iso, now_ms
from testkit.own_redis import own_redis
from testkit.processes import free_port, stop_group
from testkit.servers import wait_ready
from webhook_app.cli.serving import DEFAULT_WORKERS
from webhook_app.worker.build import build_forwarder

SECRET = "bench-webhook-secret-0123456789"  # settings want >= 24 bytes
CONNECTORS = 20
PREFIX = "bench:"


#: The production gunicorn configuration: the benchmark serves the app as deploy/ does.
GUNICORN_CONF = Path(__file__).resolve().parents[1] / "deploy" / "gunicorn.conf.py"
#: AOF everysec, as deploy/ runs Redis in production.
REDIS_AOF = ("--appendonly", "yes", "--appendfsync", "everysec")


def start_gunicorn(
    app: str, env: dict[str, str], workers: int, log: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """Serve ``app`` with deploy/gunicorn.conf.py on a free loopback port; logs go to ``log``.

    The production file, so the benchmark pays what production pays per request (its
    access record, multiprocess metrics); only the bind address and the worker count are
    the benchmark's. The logs go to a file: one line per request would bury the results.
    (testkit's ``webhook_server`` serves the app alone; this serves ``bench/_app.py``'s,
    which adds the trivial endpoint.)
    """
    port = free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--config", str(GUNICORN_CONF), app],
            env={
                **os.environ,
                "GUNICORN_BIND": f"127.0.0.1:{port}",
                "GUNICORN_WORKERS": str(workers),
                "FIVETRAN_EVENTS_LOG_FORMAT": "json",
                **env,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base + "/readyz", proc=proc)
    except (TimeoutError, RuntimeError):
        stop_group(proc, timeout=15)
        sys.exit(f"gunicorn did not become ready (its log: {log})")
    return proc, base


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


#: One client's share: base URL, path, bodies, and for a paced run its first appointed
#: time (monotonic clock) and the gap between its sends; None and 0 send back to back.
Slice = tuple[str, str, list[bytes], float | None, float]


def drive(args: Slice) -> tuple[list[float], list[bytes], int]:
    """POST each body over one keep-alive connection; return latencies, acked bodies, errors.

    Paced, each body goes at its appointed time and its latency counts from that time,
    not from the send: a client held up by a slow answer sends late, and that lateness
    is the server's.
    """
    base, path, bodies, start, gap = args
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    latencies, acked, errors = [], [], 0
    for i, body in enumerate(bodies):
        t0 = time.monotonic()
        if start is not None:
            t0 = start + i * gap
            if (ahead := t0 - time.monotonic()) > 0:
                time.sleep(ahead)
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(body, SECRET)}
        try:
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            errors += 1
            conn.close()
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            continue
        latencies.append(time.monotonic() - t0)
        if resp.status == 200 and json.loads(data).get("status") in ("recorded", "ok"):
            acked.append(body)
        else:
            errors += 1
    conn.close()
    return latencies, acked, errors


def paced(
    pool: ProcessPoolExecutor, base: str, bodies: list[bytes], clients: int, rate: float
) -> dict[str, object]:
    """Send ``bodies`` to the webhook open-loop at ``rate`` per second over ``clients``."""
    start = time.monotonic() + 0.5  # every client has started by then
    gap = clients / rate
    slices: list[Slice] = [
        (base, "/webhooks/fivetran", bodies[i::clients], start + i / rate, gap)
        for i in range(clients)
    ]
    results = list(pool.map(drive, slices))
    lat = sorted(x for r in results for x in r[0])
    return {
        "p50": lat[len(lat) // 2] * 1000,
        "p99": lat[int(len(lat) * 0.99) - 1] * 1000,
        "acked": [b for r in results for b in r[1]],
        "errors": sum(r[2] for r in results),
    }


class RedisCost:
    """Redis's CPU time and its per-call times while the webhook rounds run."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.cpu = 0.0
        self.client.config_resetstat()

    def _cpu(self) -> float:
        info = self.client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def measure(self, run: Callable[[], dict[str, object]]) -> dict[str, object]:
        before = self._cpu()
        result = run()
        self.cpu += self._cpu() - before
        return result

    def line(self, deliveries: int) -> str:
        stats = self.client.info("commandstats")
        per_call = ", ".join(
            f"{name} {stats[f'cmdstat_{name}']['usec_per_call']:.1f} us/call"
            for name in ("evalsha", "eval", "exec")
            if f"cmdstat_{name}" in stats
        )
        return (
            f"Redis CPU per delivery: {self.cpu / max(deliveries, 1) * 1e6:.0f} us "
            f"(webhook rounds; {per_call}; EXEC's time includes the EVALs inside it)"
        )


def phase(
    pool: ProcessPoolExecutor, base: str, path: str, bodies: list[bytes], clients: int
) -> dict[str, object]:
    slices: list[Slice] = [(base, path, bodies[i::clients], None, 0.0) for i in range(clients)]
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


def verify(client: redis.Redis, url: str, acked: list[bytes], per_sync: int = 1) -> str:
    """Check every acknowledged delivery is in the history exactly once, with its
    ``per_sync`` deliveries (2 with lineage: the dataset's and the COMPLETE's) due now and
    the sweepers woken; then a worker's sweep queues one RQ job each (the webhook queues
    none)."""
    ok_members = 0
    for c in range(CONNECTORS):
        keys = ConnectorKeys(PREFIX, f"conn_{c}")
        ok_members += client.zcard(keys.ok)
    listed = client.zcard(deliveries_key(PREFIX))
    due = client.zcount(due_key(PREFIX), "-inf", now_ms())
    woken = client.llen(sweep_wake_key(PREFIX))
    settings = Settings(redis_url=url, key_prefix=PREFIX, airflow_url="http://127.0.0.1:9")
    expected = len(acked) * per_sync
    fw = build_forwarder(settings, with_airflow=False)
    swept = fw.sweep(limit=expected + 1)
    jobs = fw.queue.count
    ids = [json.loads(b)["sync_id"] for b in acked]
    if len(set(ids)) != len(ids):
        return "FAILED: duplicate acknowledgements"
    counts = f"{len(acked)} acked, {ok_members} recorded, {listed} deliveries, {due} due"
    if ok_members != len(acked) or not listed == due == swept == jobs == expected:
        return f"FAILED: {counts}, wake list {woken}, {swept} swept, {jobs} jobs"
    if woken != 1:
        return f"FAILED: the wake list holds {woken} elements, not 1"
    return (
        f"ok ({len(acked)} acked = {ok_members} recorded; {listed} deliveries due; "
        f"one sweep queued {jobs} jobs)"
    )


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
    ap.add_argument(
        "--paced",
        type=int,
        default=2000,
        help="deliveries sent open-loop at half the trivial rate after the rounds",
    )
    ap.add_argument(
        "--lineage",
        action="store_true",
        help="OpenLineage on (OPENLINEAGE_URL): each sync_end also makes its COMPLETE delivery",
    )
    a = ap.parse_args()
    if not 100 <= a.deliveries <= 100_000:
        ap.error("--deliveries must be between 100 and 100000")
    if not 1 <= a.rounds <= a.deliveries // 100:
        ap.error("--rounds must be between 1 and deliveries/100")
    if not 100 <= a.paced <= 100_000:
        ap.error("--paced must be between 100 and 100000")
    log = Path(tempfile.mkstemp(prefix="fte-bench-ingest-", suffix=".log")[1])

    with (
        tempfile.TemporaryDirectory(prefix="fte-bench-") as tmp,
        own_redis(Path(tmp) / "redis", *REDIS_AOF) as redis_server,
    ):
        url = redis_server.url
        # Forwarding on, so each delivery also creates its delivery record, due now (the
        # bench runs no worker and never calls Airflow; verify sweeps once at the end).
        env = {
            "FIVETRAN_EVENTS_REDIS_URL": url,
            "FIVETRAN_EVENTS_WEBHOOK_SECRETS": SECRET,
            "FIVETRAN_EVENTS_KEY_PREFIX": PREFIX,
            "FIVETRAN_EVENTS_AIRFLOW_URL": "http://127.0.0.1:9",
            "PROMETHEUS_MULTIPROC_DIR": str(Path(tmp) / "metrics"),  # as `serve` sets it
        }
        if a.lineage:  # the web process only creates the deliveries: nothing listens here
            env["OPENLINEAGE_URL"] = "http://127.0.0.1:9"
        gunicorn, base = start_gunicorn("bench._app:app", env, a.workers, log)
        client = redis.Redis.from_url(url)
        try:
            bodies = make_bodies(a.deliveries + a.paced)
            bodies, paced_bodies = bodies[: a.deliveries], bodies[a.deliveries :]
            size = -(-a.deliveries // a.rounds)
            chunks = [bodies[i : i + size] for i in range(0, a.deliveries, size)]
            noops, hooks = [], []
            with ProcessPoolExecutor(a.clients) as pool:
                phase(pool, base, "/bench/noop", bodies[:200], a.clients)  # warm up
                before = client.info("memory")["used_memory"]  # the noop writes nothing
                cost = RedisCost(client)
                for chunk in chunks:
                    noops.append(phase(pool, base, "/bench/noop", chunk, a.clients))
                    hooks.append(
                        cost.measure(
                            partial(phase, pool, base, "/webhooks/fivetran", chunk, a.clients)
                        )
                    )
                noops.append(phase(pool, base, "/bench/noop", chunks[-1], a.clients))
                after = client.info("memory")["used_memory"]
                redis_line = cost.line(a.deliveries)
                trivial = merge(noops)
                half = cast(float, trivial["rate"]) / 2
                steady = paced(pool, base, paced_bodies, a.clients, half)
            hook = merge(hooks)
            history_bytes = sum(
                client.memory_usage(k) or 0 for k in client.scan_iter(f"{PREFIX}*", count=1000)
            )
            acked = cast(list[bytes], hook["acked"]) + cast(list[bytes], steady["acked"])
            check = verify(client, url, acked, per_sync=2 if a.lineage else 1)
        finally:
            stop_group(gunicorn, timeout=15)

    ratios = [
        h["rate"] / ((before_["rate"] + after_["rate"]) / 2)  # type: ignore[operator]
        for h, before_, after_ in zip(hooks, noops, noops[1:], strict=False)
    ]
    n = len(hook["acked"])  # type: ignore[arg-type]
    print(
        f"deliveries={a.deliveries} clients={a.clients} gunicorn_workers={a.workers} "
        f"rounds={len(hooks)}"
    )
    for name, r in (("trivial POST", trivial), ("webhook sync_end", hook)):
        print(
            f"{name:18} {r['rate']:8.0f} events/s  p50 {r['p50']:6.2f} ms  "
            f"p99 {r['p99']:6.2f} ms  errors {r['errors']}"
        )
    print(
        f"ratio webhook/trivial: {statistics.median(ratios):.2f} (goal >= 0.5; median of "
        f"{len(ratios)} rounds, {min(ratios):.2f}-{max(ratios):.2f})"
    )
    print(
        f"Redis bytes per recorded sync: {(after - before) / max(n, 1):.0f} in all "
        f"(history + delivery), {history_bytes / max(len(acked), 1):.0f} for the history alone"
    )
    print(
        f"paced at {half:.0f}/s (half the trivial rate): {len(paced_bodies)} deliveries, "
        f"p50 {steady['p50']:.2f} ms  p99 {steady['p99']:.2f} ms (goal < 20 ms)  "
        f"errors {steady['errors']}"
    )
    print(redis_line)
    print(f"exactly-once check: {check}")
    print(f"server logs: {log}")
    return 0 if check.startswith("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
