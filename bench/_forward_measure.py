"""The forward benchmark's measurement: send signed deliveries, read back Airflow's times.

Every time is read from where it is made: the webhook's acknowledgement on this side,
Airflow's own asset event timestamp and DAG run start, and the delivery record's
``first_attempt_ms`` (when a worker picked the job up).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar, cast

import redis
import requests

from fivetran_events.model import SIGNATURE_HEADER, sign
from testkit.airflow_harness import AirflowServer
from testkit.processes import poll_until

from ._forward_stack import CONNECTOR, DAGS, SECRET, URI, WATCHED, WATCHED_URI, Stack

T = TypeVar("T")
#: Airflow's DAG run states after which a run does nothing more.
RUN_DONE = frozenset({"success", "failed"})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def wait_until(what: str, check: Callable[[], T | None], timeout: float, interval: float) -> T:
    """Poll ``check`` until it gives something; an unanswered request is a 'not yet'."""

    def tolerant() -> T | None:
        try:
            return check()
        except (requests.RequestException, redis.RedisError):
            return None

    return poll_until(tolerant, what, timeout, interval)


def body(sync_id: str, created: datetime, connector: str) -> bytes:
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


def all_events(airflow: AirflowServer, uri: str) -> list[dict[str, Any]]:
    """Every event of the asset, page by page (Airflow caps a page at 100 by default)."""
    asset = airflow.asset_id(uri)
    events: list[dict[str, Any]] = []
    while asset is not None:
        resp = airflow.get(
            "/api/v2/assets/events",
            params={
                "asset_id": asset,
                "limit": 100,
                "offset": len(events),
                "order_by": "timestamp",
            },
        )
        resp.raise_for_status()
        page = resp.json()
        events += page["asset_events"]
        if not page["asset_events"] or len(events) >= page["total_entries"]:
            break
    return events


def asset_events(
    airflow: AirflowServer,
    uri: str,
    acks: dict[str, float],
    sync_extra: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Wait for each sync's asset event; return them by sync id."""

    def events() -> dict[str, dict[str, Any]]:
        found = {str(sync_extra(e["extra"]).get("sync_id")): e for e in all_events(airflow, uri)}
        return found if all(s in found for s in acks) else {}

    return wait_until(f"every asset event of {uri}", events, 120, 0.5)


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
        by_id = {e["id"]: e for e in all_events(airflow, uri)}
        starts: dict[str, float] = {}
        for s in acks:
            ev = by_id[by_sync[s]["id"]]
            dagrun = next(iter(ev.get("created_dagruns") or []), None)
            if dagrun is None:
                return {}
            run = airflow.get(f"/api/v2/dags/{dagrun['dag_id']}/dagRuns/{dagrun['run_id']}").json()
            if not run.get("start_date"):
                return {}
            starts[s] = datetime.fromisoformat(run["start_date"]).timestamp()
        return starts

    return created, wait_until(f"every DAG run of {uri} to start", runs, 180, 1.0)


def runs_settled(airflow: AirflowServer) -> bool:
    """Whether both DAGs ran at least once and no run of theirs is still going."""
    runs = [airflow.dag_runs(dag) for dag in DAGS]
    return all(runs) and all(r["state"] in RUN_DONE for rs in runs for r in rs)


def warm_up(stack: Stack, session: requests.Session) -> None:
    """One delivery per connector, then wait until Airflow has finished running their DAGs.

    Steady state: the worker holds its token and the asset id (shared by its processes),
    and Airflow has run its first DAG runs, which start the LocalExecutor's worker
    processes and keep its api-server and database busy for seconds (the delivery
    posted meanwhile waited 1.7-3.4 s in the lookup before its POST).
    """
    for connector in (CONNECTOR, WATCHED):
        send(stack.url, f"warm-{uuid.uuid4()}", connector, session)
    wait_until("the warm-up's DAG runs to finish", lambda: runs_settled(stack.airflow), 180, 1.0)


def measure(stack: Stack, n: int, gap: float) -> dict[str, Any]:
    """Send the clean run to both connectors, then the REST path with one POST held."""
    airflow = stack.airflow
    session = requests.Session()
    warm_up(stack, session)
    acks: dict[str, float] = {}
    watch_acks: dict[str, float] = {}
    for i in range(n):
        for connector, into in ((CONNECTOR, acks), (WATCHED, watch_acks)):
            sid = f"bench-{i}-{uuid.uuid4()}"
            into[sid] = send(stack.url, sid, connector, session)
        time.sleep(gap)
    created, started = event_and_run(airflow, URI, acks, lambda x: x)
    w_created, w_started = event_and_run(
        airflow, WATCHED_URI, watch_acks, lambda x: x.get("payload") or {}
    )
    # The REST path again, the second delivery's POST held for Airflow's timeout.
    slow_acks: dict[str, float] = {}
    for i in range(n):
        stack.holds.holds = 1 if i == 1 else 0
        sid = f"slow-{i}-{uuid.uuid4()}"
        slow_acks[sid] = send(stack.url, sid, CONNECTOR, session)
        time.sleep(gap)
    slow_created = events_created(airflow, URI, slow_acks, lambda x: x)
    held = stack.holds.held[0][1]
    r = redis.Redis(port=stack.redis_port)
    records = {
        cast(bytes, r.hget(k, "sync_id") or b"").decode(): r.hgetall(k)
        for k in r.scan_iter("fte:fwd:d:*")
    }
    retried = sum(1 for s in acks if int(records[s][b"attempts"]) > 1)
    # Where our part's time goes: waiting in the queue, then the attempt itself.
    picked = {s: int(records[s][b"first_attempt_ms"]) / 1000 for s in (*acks, *slow_acks)}
    return {
        "n": n,
        "to_event": [created[s] - acks[s] for s in acks],
        "queued": [picked[s] - acks[s] for s in acks],
        "attempt": [created[s] - picked[s] for s in acks],
        "to_run": [started[s] - acks[s] for s in acks],
        "watch_to_event": [w_created[s] - watch_acks[s] for s in watch_acks],
        "watch_to_run": [w_started[s] - watch_acks[s] for s in watch_acks],
        "acks": list(acks.values()),
        "shared_runs": n - len(set(started.values())),
        "retried": retried,
        "slow_to_event": [slow_created[s] - slow_acks[s] for s in slow_acks if s != held],
        "slow_queued": [picked[s] - slow_acks[s] for s in slow_acks if s != held],
        "held_to_event": slow_created[held] - slow_acks[held] if held else None,
    }
