"""Forward successful syncs to Airflow datasets, exactly once per (sync, URI).

One *delivery* per (sync, dataset URI), a Redis hash (keys.py). The webhook creates the
deliveries and queues their first attempt in the same MULTI as the history write, so a
recorded success always has its deliveries. An attempt (an RQ job run by
``fivetran-events worker``):

1. takes the delivery's lock (a lease: a dead worker's lock expires) and sets its
   ``due`` time to the end of the lease, so if this worker dies the sweeper queues the
   delivery again;
2. if an earlier attempt left an in-flight mark (it may have POSTed and died before
   recording it), looks the event up in Airflow by asset, time and ``extra.sync_id``;
   found: delivered, nothing posted;
3. otherwise writes the in-flight mark, POSTs, and records Airflow's event id.

Connection errors, timeouts, 5xx and 429 schedule a retry (exponential backoff with
jitter, at least the Retry-After) until ``forward_retry_hours`` after receipt; 404 (no
DAG uses the URI) records the delivery as undelivered, any other 4xx as failed, each
with the reason. Both are replayable. Retries and lease expiries are due times in one
sorted set; the worker's sweeper queues whatever is due, so no RQ scheduler is needed
and a killed worker's delivery resumes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import redis
from redis.client import Pipeline
from redis.exceptions import LockError
from rq import Queue

from fivetran_events import Event, Settings
from fivetran_events.keys import (
    ConnectorKeys,
    deliveries_key,
    delivery_id,
    delivery_key,
    delivery_lock_key,
    due_key,
    sync_deliveries_key,
    undelivered_key,
)
from fivetran_events.timeutil import iso, now_ms
from fivetran_events.uris import UriMap

from . import metrics
from .airflow_client import (
    AirflowClient,
    AirflowEvent,
    AirflowRejected,
    AirflowUnavailable,
    AssetNotFound,
    lookup_window_start,
)

log = logging.getLogger(__name__)

#: The dotted path of the job; a string, so the web process never imports the worker side.
FORWARD_JOB = "webhook_app.jobs.forward_sync"
#: Deliveries the sweeper queues per pass.
SWEEP_BATCH = 500
#: How long RQ keeps a finished attempt's result, and a failed one's traceback.
RESULT_TTL = 86_400
FAILURE_TTL = 7 * 86_400


class DeliveryState(str, Enum):
    PENDING = "pending"          # queued or being attempted
    RETRYING = "retrying"        # an attempt failed in a way that may pass; next_attempt_at
    DELIVERED = "delivered"      # Airflow has the event; event_id is its id
    UNDELIVERED = "undelivered"  # 404 (no DAG uses the URI) or retries ran out: replayable
    FAILED = "failed"            # Airflow refused it (4xx); the reason holds its answer


FINAL = frozenset({DeliveryState.DELIVERED, DeliveryState.UNDELIVERED, DeliveryState.FAILED})
GIVEN_UP = frozenset({DeliveryState.UNDELIVERED, DeliveryState.FAILED})

# Queue ``id`` when it is due (score <= now) and push its due time to the lease's end, in one
# step, so two sweepers never both take the same delivery.
_CLAIM = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) <= tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return 1
end
return 0
"""


# Create a delivery record unless it exists (a second success under one sync id must not
# reset a delivered record), index it, and make it due. One command instead of ~20 keeps
# the webhook's transaction short: it runs inside the history write's MULTI.
# KEYS: record, sync's set, listing, due set. ARGV: id, ttl s, received ms, due ms,
# listing cutoff ms, then field/value pairs.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 6))
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], 'NX', ARGV[3], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[5])
redis.call('ZADD', KEYS[4], 'NX', ARGV[4], ARGV[1])
return 1
"""


def forward_job_id(delivery: str, tag: str | int | None = None) -> str:
    """Name an attempt's RQ job (RQ allows only letters, digits, '_' and '-' in ids)."""
    digest = hashlib.blake2b(delivery.encode(), digest_size=12).hexdigest()
    return f"fwd-{digest}" if tag is None else f"fwd-{digest}-{tag}"


def _s(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Delivery:
    """One delivery as stored in its hash."""

    id: str
    fields: dict[str, str]

    def get(self, name: str) -> str | None:
        return self.fields.get(name) or None

    def ms(self, name: str) -> int | None:
        value = self.get(name)
        return int(value) if value else None

    @property
    def state(self) -> DeliveryState:
        return DeliveryState(self.fields.get("state", "pending"))

    @property
    def uri(self) -> str:
        return self.fields["uri"]

    def to_dict(self) -> dict[str, Any]:
        """The public view (API, CLI)."""
        f = self.fields
        event_id = self.get("event_id")
        return {
            "delivery_id": self.id,
            "connector_id": f.get("connector_id"),
            "sync_id": f.get("sync_id"),
            "uri": f.get("uri"),
            "state": self.state.value,
            "attempts": int(f.get("attempts") or 0),
            "airflow_event_id": int(event_id) if event_id else None,
            "airflow_event_at": self.get("event_at"),
            "reason": self.get("reason"),
            "received_at": iso(self.ms("received_ms")),
            "next_attempt_at": (iso(self.ms("next_attempt_ms"))
                                if self.state is DeliveryState.RETRYING else None),
            "updated_at": iso(self.ms("updated_ms")),
        }


class DeliveryStore:
    """Read and write delivery records (key names from fivetran_events.keys)."""

    def __init__(self, client: redis.Redis, prefix: str, retention_s: int) -> None:
        self.client = client
        self.prefix = prefix
        self.retention_s = retention_s

    def key(self, did: str) -> str:
        return delivery_key(self.prefix, did)

    def create(self, pipe: Pipeline, event: Event, uri: str, received_ms: int,
               due_ms: int) -> str:
        """Queue the writes that create a delivery (kept as is if it already exists)."""
        assert event.sync_id is not None
        did = delivery_id(event.connector_id, event.sync_id, uri)
        key = self.key(did)
        base = {"connector_id": event.connector_id, "sync_id": event.sync_id, "uri": uri,
                "connector_name": event.connector_name or "",
                "connector_type": event.connector_type or "",
                "group_id": event.group_id or "", "status": event.status or "",
                "ended_ms": str(event.created_ms), "received_ms": str(received_ms),
                "window_ms": str(received_ms), "state": DeliveryState.PENDING.value,
                "attempts": "0", "updated_ms": str(received_ms)}
        skey = sync_deliveries_key(self.prefix, event.connector_id, event.sync_id)
        # The listing keeps as long as the history does (the hashes expire by themselves).
        cutoff = received_ms - self.retention_s * 1000
        pairs = [x for item in base.items() for x in item]
        # EVAL, not EVALSHA: inside MULTI a NOSCRIPT error would fail this command alone
        # while the history write commits; redis-py's script objects also cost a SCRIPT
        # EXISTS round trip per transaction. Redis caches the compiled script anyway.
        pipe.eval(_CREATE, 4, key, skey, deliveries_key(self.prefix), due_key(self.prefix),
                  did, self.retention_s, received_ms, due_ms, cutoff, *pairs)
        return did

    def get(self, did: str) -> Delivery | None:
        raw = self.client.hgetall(self.key(did))
        if not raw:
            return None
        return Delivery(did, {_s(k) or "": _s(v) or "" for k, v in raw.items()})

    def many(self, ids: Iterable[str]) -> list[Delivery]:
        ids = list(ids)
        pipe = self.client.pipeline(transaction=False)
        for did in ids:
            pipe.hgetall(self.key(did))
        out = []
        for did, raw in zip(ids, pipe.execute(), strict=True):
            if raw:
                out.append(Delivery(did, {_s(k) or "": _s(v) or "" for k, v in raw.items()}))
        return out

    def for_syncs(self, connector_id: str, sync_ids: Iterable[str]) -> dict[str, list[Delivery]]:
        """Return each sync's deliveries, sorted by URI (one round trip per batch)."""
        sync_ids = list(dict.fromkeys(sync_ids))
        pipe = self.client.pipeline(transaction=False)
        for sid in sync_ids:
            pipe.smembers(sync_deliveries_key(self.prefix, connector_id, sid))
        members = pipe.execute()
        ids = sorted({_s(m) or "" for ms in members for m in ms})
        by_id = {d.id: d for d in self.many(ids)}
        out: dict[str, list[Delivery]] = {}
        for sid, ms in zip(sync_ids, members, strict=True):
            found = [by_id[_s(m) or ""] for m in ms if (_s(m) or "") in by_id]
            out[sid] = sorted(found, key=lambda d: d.uri)
        return out

    def recent(self, limit: int = 100, state: DeliveryState | None = None,
               scan_limit: int = 100_000) -> list[Delivery]:
        """Return the newest deliveries (of one state), newest first."""
        out: list[Delivery] = []
        start = 0
        page = max(limit, 200)
        while len(out) < limit and start < scan_limit:
            ids = [_s(m) or "" for m in self.client.zrevrange(deliveries_key(self.prefix),
                                                               start, start + page - 1)]
            if not ids:
                break
            for d in self.many(ids):
                if state is None or d.state is state:
                    out.append(d)
            start += page
        return out[:limit]

    def given_up(self) -> list[str]:
        return [_s(m) or "" for m in self.client.zrange(undelivered_key(self.prefix), 0, -1)]


class Forwarder:
    """Make forwarding attempts, schedule retries, sweep due deliveries, replay."""

    def __init__(self, settings: Settings, client: redis.Redis, airflow: AirflowClient | None,
                 queue: Queue, uri_map: UriMap, *, clock: Callable[[], int] = now_ms,
                 rng: Callable[[], float] = random.random) -> None:
        self.settings = settings
        self.redis = client
        self.airflow = airflow
        self.queue = queue
        self.uri_map = uri_map
        self.store = DeliveryStore(client, settings.key_prefix,
                                   int(settings.retention_days * 86_400))
        self.clock = clock
        self.rng = rng
        # A lease outlives the longest attempt: a token, an asset lookup, an event lookup
        # and the POST, each up to a connect and a read timeout, a 401 doubling one.
        self.lease_ms = int(max(settings.forward_lease_seconds,
                                12 * settings.airflow_timeout_seconds) * 1000)
        self._claim = client.register_script(_CLAIM)

    # --- the webhook's side ----------------------------------------------------------------

    def enqueue(self, pipe: Pipeline, event: Event) -> list[str]:
        """Create the deliveries of a successful sync and queue their first attempts.

        Runs inside the history write's MULTI block: all of it commits with the history
        or none of it does.
        """
        now = self.clock()
        ids = []
        for uri in self.uri_map.uris(event.connector_id, event.connector_name,
                                     event.connector_type, event.group_id):
            did = self.store.create(pipe, event, uri, now, now + self.lease_ms)
            self._enqueue(did, pipe, tag=None)
            ids.append(did)
        return ids

    def _enqueue(self, did: str, pipe: Pipeline | None, tag: str | int | None) -> None:
        self.queue.enqueue(FORWARD_JOB, kwargs={"delivery": did},
                           job_id=forward_job_id(did, tag), pipeline=pipe,
                           result_ttl=RESULT_TTL, failure_ttl=FAILURE_TTL,
                           job_timeout=int(self.lease_ms / 1000),
                           description=f"forward {did}")

    # --- the worker's side -----------------------------------------------------------------

    def attempt(self, did: str) -> dict[str, Any]:
        """Make one attempt at delivery ``did``; return what happened."""
        lock = self.redis.lock(delivery_lock_key(self.settings.key_prefix, did),
                               timeout=self.lease_ms / 1000, blocking=False)
        if not lock.acquire():
            metrics.FORWARD_OUTCOMES.labels(outcome="busy").inc()
            return {"delivery": did, "outcome": "busy"}
        started = time.perf_counter()
        try:
            return self._attempt_locked(did)
        finally:
            metrics.FORWARD_REQUEST_SECONDS.observe(time.perf_counter() - started)
            try:
                lock.release()
            except LockError:  # the lease ran out; whoever holds it now goes on
                log.warning("delivery %s: lease expired during the attempt", did)

    def _attempt_locked(self, did: str) -> dict[str, Any]:
        d = self.store.get(did)
        if d is None:
            self.redis.zrem(due_key(self.settings.key_prefix), did)
            return {"delivery": did, "outcome": "missing"}
        if d.state in FINAL:
            self.redis.zrem(due_key(self.settings.key_prefix), did)
            return {"delivery": did, "outcome": f"already {d.state.value}"}
        if self.airflow is None:
            raise RuntimeError("forwarding needs FIVETRAN_EVENTS_AIRFLOW_URL")
        now = self.clock()
        key = self.store.key(did)
        extra = json.loads(d.get("extra") or "null") or self.build_extra(d)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(key, "attempts", 1)
            pipe.hsetnx(key, "first_attempt_ms", str(now))
            pipe.hset(key, mapping={"extra": json.dumps(extra, sort_keys=True),
                                    "updated_ms": str(now)})
            pipe.zadd(due_key(self.settings.key_prefix), {did: now + self.lease_ms})
            pipe.execute()
        mark = d.ms("inflight_ms")
        posted = False
        try:
            if mark is not None:
                found = self.airflow.find_event(d.uri, lookup_window_start(mark),
                                                {"sync_id": extra["sync_id"],
                                                 "connector_id": extra["connector_id"]})
                if found is not None:
                    return self._delivered(d, found, recovered=True)
            # The mark is durable before the POST: whoever finds it looks before posting.
            self.redis.hset(key, "inflight_ms", str(now))
            posted = True
            event = self.airflow.post_event(d.uri, extra)
            return self._delivered(d, event, recovered=False)
        except AssetNotFound as exc:
            return self._give_up(d, DeliveryState.UNDELIVERED, str(exc), clear_mark=posted)
        except AirflowRejected as exc:
            return self._give_up(d, DeliveryState.FAILED, str(exc), clear_mark=posted)
        except AirflowUnavailable as exc:
            if posted and not exc.maybe_sent and mark is None:
                self.redis.hdel(key, "inflight_ms")  # never reached Airflow: nothing to find
            return self._retry(d, exc)
        except (ValueError, KeyError, TypeError) as exc:
            # A 2xx that is not Airflow's JSON (a proxy's error page, say): retry, in time.
            return self._retry(d, AirflowUnavailable(
                f"unexpected answer from Airflow: {type(exc).__name__}: {exc}"))

    def build_extra(self, d: Delivery) -> dict[str, Any]:
        """Build the event's ``extra`` from the delivery and the connector's history."""
        cid = d.fields["connector_id"]
        sid = d.fields["sync_id"]
        ended = int(d.fields["ended_ms"])
        keys = ConnectorKeys(self.settings.key_prefix, cid)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zscore(keys.starts, sid)
        pipe.zrevrangebyscore(keys.ok, f"({ended}", "-inf", start=0, num=1, withscores=True)
        started, previous = pipe.execute()
        since = f"({int(previous[0][1])}" if previous else "-inf"
        resyncs = [json.loads(_s(m) or "{}")
                   for m in self.redis.zrangebyscore(keys.resyncs, since, ended)]
        whole = any(r.get("e") == "resync_connector" for r in resyncs)
        tables = sorted({t for r in resyncs if r.get("e") == "resync_table"
                         for t in r.get("tables") or []})
        extra: dict[str, Any] = {
            "source": "fivetran-events",
            "connector_id": cid,
            "connector_name": d.get("connector_name"),
            "connector_type": d.get("connector_type"),
            "group_id": d.get("group_id"),
            "sync_id": sid,
            "status": d.get("status"),
            "started_at": iso(int(started)) if started is not None else None,
            "ended_at": iso(ended),
            # The first success after a resync rewrote the data: consumers may need to
            # rebuild rather than append. resync_table names the tables it concerned.
            "full_refresh": bool(resyncs),
        }
        if tables and not whole:
            extra["full_refresh_tables"] = tables
        return extra

    def _finish(self, d: Delivery, fields: dict[str, str], drop: Iterable[str],
                given_up: bool) -> None:
        prefix = self.settings.key_prefix
        key = self.store.key(d.id)
        mapping: dict[Any, Any] = {**fields, "updated_ms": str(self.clock())}
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=mapping)
            drop = list(drop)
            if drop:
                pipe.hdel(key, *drop)
            pipe.zrem(due_key(prefix), d.id)
            if given_up:
                pipe.zadd(undelivered_key(prefix), {d.id: self.clock()})
            else:
                pipe.zrem(undelivered_key(prefix), d.id)
            pipe.execute()

    def _delivered(self, d: Delivery, event: AirflowEvent, recovered: bool) -> dict[str, Any]:
        self._finish(d, {"state": DeliveryState.DELIVERED.value, "event_id": str(event.id),
                         "event_at": iso(event.timestamp) or "",
                         # found in Airflow after an attempt died between POST and record
                         "recovered": "1" if recovered else "0"},
                     ("inflight_ms", "reason", "next_attempt_ms"), given_up=False)
        received = d.ms("received_ms")
        if received is not None and not recovered:
            metrics.FORWARD_LATENCY.observe(max(0.0, event.timestamp.timestamp()
                                                - received / 1000))
        outcome = "recovered" if recovered else "delivered"
        metrics.FORWARD_OUTCOMES.labels(outcome=outcome).inc()
        log.info("delivery %s: %s as Airflow event %s", d.id, outcome, event.id)
        return {"delivery": d.id, "outcome": outcome, "event_id": event.id}

    def _give_up(self, d: Delivery, state: DeliveryState, reason: str,
                 clear_mark: bool) -> dict[str, Any]:
        drop = ["next_attempt_ms"] + (["inflight_ms"] if clear_mark else [])
        self._finish(d, {"state": state.value, "reason": reason}, drop, given_up=True)
        metrics.FORWARD_OUTCOMES.labels(outcome=state.value).inc()
        log.warning("delivery %s: %s: %s", d.id, state.value, reason)
        return {"delivery": d.id, "outcome": state.value, "reason": reason}

    def backoff_seconds(self, attempts: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter (half fixed, half random), at least Retry-After."""
        s = self.settings
        ceiling = min(s.forward_backoff_max_seconds,
                      s.forward_backoff_seconds * 2 ** min(max(attempts - 1, 0), 30))
        delay = ceiling / 2 + self.rng() * ceiling / 2
        return max(delay, retry_after or 0.0)

    def _retry(self, d: Delivery, exc: AirflowUnavailable) -> dict[str, Any]:
        now = self.clock()
        attempts = int(self.redis.hget(self.store.key(d.id), "attempts") or 1)
        delay_ms = int(self.backoff_seconds(attempts, exc.retry_after) * 1000)
        deadline = (d.ms("window_ms") or now) + int(self.settings.forward_retry_hours * 3_600_000)
        if now + delay_ms > deadline:
            reason = (f"gave up after {attempts} attempts over "
                      f"{self.settings.forward_retry_hours:g} h; last error: {exc}")
            return self._give_up(d, DeliveryState.UNDELIVERED, reason, clear_mark=False)
        prefix = self.settings.key_prefix
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.store.key(d.id), mapping={
                "state": DeliveryState.RETRYING.value, "reason": str(exc),
                "next_attempt_ms": str(now + delay_ms), "updated_ms": str(now)})
            pipe.zadd(due_key(prefix), {d.id: now + delay_ms})
            pipe.execute()
        metrics.FORWARD_OUTCOMES.labels(outcome="retrying").inc()
        log.info("delivery %s: retry in %.1fs: %s", d.id, delay_ms / 1000, exc)
        return {"delivery": d.id, "outcome": "retrying", "retry_in_s": delay_ms / 1000,
                "reason": str(exc)}

    def sweep(self, now: int | None = None, limit: int = SWEEP_BATCH) -> int:
        """Queue an attempt for every delivery that is due; return how many were queued."""
        now = self.clock() if now is None else now
        due = due_key(self.settings.key_prefix)
        ids = [_s(m) or "" for m in self.redis.zrangebyscore(due, "-inf", now, start=0,
                                                              num=limit)]
        queued = 0
        for did in ids:
            if self._claim(keys=[due], args=[did, now, now + self.lease_ms]):
                self._enqueue(did, None, tag=now)
                queued += 1
        return queued

    def replay(self, ids: Iterable[str]) -> list[str]:
        """Give given-up (or stuck) deliveries a new retry window and queue them now."""
        now = self.clock()
        prefix = self.settings.key_prefix
        replayed = []
        for d in self.store.many(ids):
            if d.state is DeliveryState.DELIVERED:
                continue
            with self.redis.pipeline(transaction=True) as pipe:
                pipe.multi()  # RQ's enqueue(pipeline=) expects the MULTI already open
                pipe.hset(self.store.key(d.id), mapping={
                    "state": DeliveryState.PENDING.value, "window_ms": str(now),
                    "reason": f"replayed at {iso(now)}", "updated_ms": str(now)})
                pipe.hdel(self.store.key(d.id), "next_attempt_ms")
                pipe.zrem(undelivered_key(prefix), d.id)
                pipe.zadd(due_key(prefix), {d.id: now + self.lease_ms})
                self._enqueue(d.id, pipe, tag=f"r{now}")
                pipe.execute()
            replayed.append(d.id)
        return replayed

    def deliveries_of_sync(self, sync_id: str, connector_id: str | None = None) -> list[str]:
        """Return the delivery ids of ``sync_id`` (of any connector unless one is named)."""
        ids = [_s(m) or "" for m in self.redis.zrange(deliveries_key(self.settings.key_prefix),
                                                        0, -1)]
        return [i for i in ids if i.split(":")[1] == sync_id
                and (connector_id is None or i.split(":")[0] == connector_id)]


def attach_forwarding(store: DeliveryStore, connector_id: str,
                      rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add each successful sync's forwarding state per URI to the syncs listing's rows."""
    wanted = [r["sync_id"] for r in rows if r.get("status") == "SUCCESSFUL"]
    found = store.for_syncs(connector_id, wanted) if wanted else {}
    for r in rows:
        if r.get("status") == "SUCCESSFUL":
            r["forwarding"] = [
                {k: v for k, v in d.to_dict().items()
                 if k not in ("connector_id", "sync_id", "delivery_id")}
                for d in found.get(r["sync_id"], [])]
    return rows
