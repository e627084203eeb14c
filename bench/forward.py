"""Benchmark: Fivetran webhook -> Airflow asset event -> DAG run, both paths, against polling.

Starts everything it measures on 127.0.0.1 and stops exactly those processes by PID: a
redis-server, the webhook server (``fivetran-events serve``, gunicorn),
``fivetran-events worker`` (a pool of ``--concurrency`` processes, its default unless
given) and a real Airflow 3 (testkit/airflow_harness.py), which the worker reaches through
a loopback proxy (testkit/delaying_proxy.py). Then it sends N signed ``sync_end``
deliveries to each of two connectors, a few seconds apart so each gets a DAG run of its
own: one connector's successes reach Airflow through the REST worker, the other's
through the watcher (``FivetranSyncEventTrigger`` in Airflow's own triggerer, reading the
same Redis; its REST deliveries go to a URI no DAG uses, so nothing else posts to
Airflow). It prints, side by side for both paths:

- webhook acknowledged -> asset event created (Airflow's own event timestamp): our part;
- webhook acknowledged -> the asset-scheduled DAG run started (Airflow's run start_date);
- what a sensor polling every 60 s (the Fivetran sensor's default ``poke_interval``)
  would need to notice the same syncs: the wait to its next poke, for every phase of the
  poke schedule against the delivery times (a uniform spread, in 100 ms steps).

Then the REST path once more, N deliveries with one slow answer among them: the proxy
holds the second one's POST for Airflow's timeout (the worker gives up on it, Airflow
commits it then, as with SQLite busy). Printed beside the clean run: ack -> event and
ack -> pickup of the other N-1 (steady state: the held delivery left out), and the held
one on a line of its own.

Usage: ``python bench/forward.py [-n 20] [--gap 3.0] [--concurrency N]`` (a few minutes on
2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import redis
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fivetran_events import Settings
from fivetran_events.signature import SIGNATURE_HEADER, sign
from testkit.airflow_harness import AirflowServer
from testkit.delaying_proxy import delaying_proxy
from testkit.processes import free_port, stop_group
from testkit.support import conn_uri

CONNECTOR = "bench_conn"
URI = f"fivetran://connector/{CONNECTOR}"
WATCHED = "bench_watch"
WATCHED_URI = f"fivetran://connector/{WATCHED}"
UNFORWARDED_URI = "fivetran://bench/not-forwarded"
WATCHER_DAG = f"""
from datetime import datetime, timezone
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher
from airflow_plugin.event_triggers import FivetranSyncEventTrigger

asset = Asset(uri="{WATCHED_URI}", name="bench_watch", watchers=[AssetWatcher(
    name="bench_watch", trigger=FivetranSyncEventTrigger(connector_id="{WATCHED}"))])
with DAG("bench_on_watch", schedule=[asset], catchup=False,
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
    EmptyOperator(task_id="consume")
"""
SECRET = "bench-webhook-secret"
POKE_INTERVAL_S = 60.0
#: How long the proxy holds the slow answer: the worker's Airflow timeout (its default).
HOLD_S = float(Settings.model_fields["airflow_timeout_seconds"].default)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class Proc:
    """A child process in a session of its own, stopped by signalling that group."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        with open(log, "ab") as out:
            self.p = subprocess.Popen(
                argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def stop(self) -> None:
        stop_group(self.p)


def wait_until(what: str, check: Any, timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except (requests.RequestException, redis.RedisError):
            value = None
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


def body(sync_id: str, created: datetime, connector: str = CONNECTOR) -> bytes:
    return json.dumps(
        {
            "event": "sync_end",
            "created": created.isoformat().replace("+00:00", "Z"),
            "connector_type": "google_cloud_postgresql",
            "connector_id": connector,
            "connector_name": "bench_pg",
            "sync_id": sync_id,
            "destination_group_id": "bench_group",
            "data": {"status": "SUCCESSFUL"},
        }
    ).encode()


def send(url: str, sync_id: str, connector: str, session: requests.Session) -> float:
    """POST one signed ``sync_end``; return when the webhook acknowledged it."""
    raw = body(sync_id, datetime.now(timezone.utc), connector)
    resp = session.post(
        f"{url}/webhooks/fivetran",
        data=raw,
        timeout=10,
        headers={SIGNATURE_HEADER: sign(raw, SECRET), "Content-Type": "application/json"},
    )
    resp.raise_for_status()
    return time.time()


def run(n: int, gap: float, concurrency: int | None, work: Path) -> dict[str, Any]:
    bin_dir = Path(sys.executable).parent
    with ExitStack() as stack:
        redis_port = free_port()
        rproc = Proc(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(redis_port),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            dict(os.environ),
            work / "redis.log",
        )
        stack.callback(rproc.stop)
        airflow = AirflowServer(
            home=work / "airflow",
            extra_env={
                "AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS": conn_uri(
                    f"redis://127.0.0.1:{redis_port}/0", "fte:"
                )
            },
        )
        stack.callback(airflow.stop)
        airflow.prepare()
        airflow.add_dag("bench_watch.py", WATCHER_DAG)
        airflow.start()
        airflow.wait_for_asset(URI)
        # The watcher stores its start position once it runs: syncs after that count.
        airflow.wait_for(
            "the watcher", lambda: airflow.asset_state(f"fivetran_events.position:{WATCHED}"), 180
        )

        proxy_url, holds = stack.enter_context(delaying_proxy(airflow.port, HOLD_S, holds=0))
        # The watched connector reaches Airflow through the watcher alone: its REST
        # deliveries go to a URI no DAG uses (ended by one lookup, nothing posted), so the
        # REST path's POSTs are the measured connector's only.
        mapping = work / "datasets.toml"
        mapping.write_text(f'[connectors]\n{WATCHED} = "{UNFORWARDED_URI}"\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("FIVETRAN_EVENTS_")}
        env.update(
            {
                "FIVETRAN_EVENTS_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
                "FIVETRAN_EVENTS_WEBHOOK_SECRETS": SECRET,
                "FIVETRAN_EVENTS_AIRFLOW_URL": proxy_url,
                "FIVETRAN_EVENTS_DATASET_MAPPING_FILE": str(mapping),
                "FIVETRAN_EVENTS_AIRFLOW_USERNAME": airflow.username,
                "FIVETRAN_EVENTS_AIRFLOW_PASSWORD": airflow.password,
            }
        )
        web_port = free_port()
        web = Proc(
            [
                str(bin_dir / "fivetran-events"),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(web_port),
                "--workers",
                "2",
            ],
            env,
            work / "web.log",
        )
        stack.callback(web.stop)
        pool = ["--concurrency", str(concurrency)] if concurrency else []
        worker = Proc([str(bin_dir / "fivetran-events"), "worker", *pool], env, work / "worker.log")
        stack.callback(worker.stop)
        url = f"http://127.0.0.1:{web_port}"
        wait_until("the webhook server", lambda: requests.get(f"{url}/readyz", timeout=2).ok, 60)

        acks: dict[str, float] = {}
        watch_acks: dict[str, float] = {}
        session = requests.Session()
        # One warm-up delivery: the worker fetches its token and the asset id once.
        for i in range(n + 1):
            for connector, into in ((CONNECTOR, acks), (WATCHED, watch_acks)):
                sid = f"bench-{i}-{uuid.uuid4()}"
                acked = send(url, sid, connector, session)
                if i:
                    into[sid] = acked
            time.sleep(gap)

        created, started = event_and_run(airflow, URI, acks, lambda x: x)
        w_created, w_started = event_and_run(
            airflow, WATCHED_URI, watch_acks, lambda x: x.get("payload") or {}
        )
        # The REST path again, the second delivery's POST held for Airflow's timeout.
        slow_acks: dict[str, float] = {}
        for i in range(n):
            holds.holds = 1 if i == 1 else 0
            sid = f"slow-{i}-{uuid.uuid4()}"
            slow_acks[sid] = send(url, sid, CONNECTOR, session)
            time.sleep(gap)
        slow_created = events_created(airflow, URI, slow_acks, lambda x: x)
        held = holds.held[0][1]
        shared_runs = n - len(set(started.values()))
        r = redis.Redis(port=redis_port)
        records = {
            cast(bytes, r.hget(k, "sync_id") or b"").decode(): r.hgetall(k)
            for k in r.scan_iter("fte:fwd:d:*")
        }
        retried = sum(1 for s in acks if int(records[s][b"attempts"]) > 1)
        # Where our part's time goes: waiting in the queue, then the attempt itself.
        picked = {s: int(records[s][b"first_attempt_ms"]) / 1000 for s in (*acks, *slow_acks)}

    to_event = [created[s] - acks[s] for s in acks]
    queued = [picked[s] - acks[s] for s in acks]
    attempt = [created[s] - picked[s] for s in acks]
    to_run = [started[s] - acks[s] for s in acks]
    # A sensor poking every 60 s notices a sync at its next poke. Over every phase of the
    # poke schedule (100 ms steps) the wait is spread uniformly over [0, 60 s).
    steps = int(POKE_INTERVAL_S * 10)
    poll = [((p / 10.0) - acks[s]) % POKE_INTERVAL_S for s in acks for p in range(steps)]
    return {
        "n": n,
        "to_event": to_event,
        "queued": queued,
        "attempt": attempt,
        "to_run": to_run,
        "watch_to_event": [w_created[s] - watch_acks[s] for s in watch_acks],
        "watch_to_run": [w_started[s] - watch_acks[s] for s in watch_acks],
        "poll": poll,
        "shared_runs": shared_runs,
        "retried": retried,
        "slow_to_event": [slow_created[s] - slow_acks[s] for s in slow_acks if s != held],
        "slow_queued": [picked[s] - slow_acks[s] for s in slow_acks if s != held],
        "held_to_event": slow_created[held] - slow_acks[held] if held else None,
    }


def asset_events(
    airflow: AirflowServer,
    uri: str,
    acks: dict[str, float],
    sync_extra: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Wait for each sync's asset event; return them by sync id."""

    def events() -> dict[str, dict[str, Any]]:
        found = {str(sync_extra(e["extra"]).get("sync_id")): e for e in airflow.asset_events(uri)}
        return found if all(s in found for s in acks) else {}

    return cast(
        "dict[str, dict[str, Any]]", wait_until(f"every asset event of {uri}", events, 120, 0.5)
    )


def events_created(
    airflow: AirflowServer,
    uri: str,
    acks: dict[str, float],
    sync_extra: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, float]:
    """Return when each sync's asset event was created (Airflow's timestamp)."""
    by_sync = asset_events(airflow, uri, acks, sync_extra)
    return {s: datetime.fromisoformat(by_sync[s]["timestamp"]).timestamp() for s in acks}


def event_and_run(
    airflow: AirflowServer,
    uri: str,
    acks: dict[str, float],
    sync_extra: Callable[[dict[str, Any]], dict[str, Any]],
) -> tuple[dict[str, float], dict[str, float]]:
    """Return when each sync's asset event was created and its DAG run started."""
    by_sync = asset_events(airflow, uri, acks, sync_extra)
    created = {s: datetime.fromisoformat(by_sync[s]["timestamp"]).timestamp() for s in acks}

    def runs() -> dict[str, float]:
        starts: dict[str, float] = {}
        for s in acks:
            refs = airflow.get(
                "/api/v2/assets/events",
                params={
                    "asset_id": by_sync[s]["asset_id"],
                    "limit": 100,
                    "order_by": "-timestamp",
                },
            ).json()["asset_events"]
            ev = next(e for e in refs if e["id"] == by_sync[s]["id"])
            dagrun = next(iter(ev.get("created_dagruns") or []), None)
            if dagrun is None:
                return {}
            run = airflow.get(f"/api/v2/dags/{dagrun['dag_id']}/dagRuns/{dagrun['run_id']}").json()
            if not run.get("start_date"):
                return {}
            starts[s] = datetime.fromisoformat(run["start_date"]).timestamp()
        return starts

    return created, wait_until(f"every DAG run of {uri} to start", runs, 180, 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20, help="deliveries (default 20)")
    ap.add_argument(
        "--gap",
        type=float,
        default=3.0,
        help="seconds between deliveries (default 3: one DAG run each)",
    )
    ap.add_argument(
        "--concurrency",
        type=int,
        help="the worker's --concurrency (default: the worker's own default)",
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fte-bench-"))
    try:
        r = run(args.n, args.gap, args.concurrency, work)
    except BaseException:
        print(f"the logs of this run stay in {work}", file=sys.stderr)
        raise
    shutil.rmtree(work, ignore_errors=True)

    def line(label: str, xs: list[float], unit: str = "s") -> str:
        scale = 1000.0 if unit == "ms" else 1.0
        return (
            f"{label:58} p50 {percentile(xs, 0.5) * scale:8.1f} {unit}   "
            f"p99 {percentile(xs, 0.99) * scale:8.1f} {unit}   "
            f"max {max(xs) * scale:8.1f} {unit}"
        )

    pool = f"--concurrency {args.concurrency}" if args.concurrency else "its default concurrency"
    print(
        f"forward benchmark: {r['n']} signed sync_end deliveries, real Redis, worker with "
        f"{pool}, Airflow 3 (SQLite, LocalExecutor) on {os.cpu_count()} cores"
    )
    print(line("webhook ack -> Airflow asset event created (our part)", r["to_event"], "ms"))
    print(line("  of which: ack -> worker picks the job up", r["queued"], "ms"))
    print(line("  of which: job picked up -> Airflow created the event", r["attempt"], "ms"))
    held = f"one POST held {HOLD_S:g} s"
    print(line(f"{held}: ack -> asset event, the other {r['n'] - 1}", r["slow_to_event"], "ms"))
    print(line(f"{held}: ack -> pickup, the other {r['n'] - 1}", r["slow_queued"], "ms"))
    if r["held_to_event"] is not None:
        label = f"{held}: ack -> asset event of the held one"
        print(f"{label:58} {r['held_to_event'] * 1000:8.1f} ms")
    print(line("webhook ack -> asset-scheduled DAG run started", r["to_run"]))
    print(line("watcher: webhook ack -> asset event created", r["watch_to_event"], "ms"))
    print(line("watcher: webhook ack -> asset-scheduled DAG run started", r["watch_to_run"]))
    print(
        f"{'watcher p50 / REST worker p50 (webhook -> DAG run)':58} "
        f"{statistics.median(r['watch_to_run']) / statistics.median(r['to_run']):8.2f}x"
    )
    print(line("polling every 60 s (default poke_interval), same syncs", r["poll"]))
    print(
        f"{'polling p50 / push-to-DAG-run p50':58} "
        f"{statistics.median(r['poll']) / statistics.median(r['to_run']):8.1f}x"
    )
    if r["retried"]:
        print(
            f"note: {r['retried']} deliveries needed more than one attempt (Airflow answered "
            "5xx or timed out, e.g. SQLite busy)"
        )
    if r["shared_runs"]:
        print(f"note: {r['shared_runs']} deliveries shared a DAG run with another")


if __name__ == "__main__":
    main()
