"""Forward successful syncs to Airflow datasets, exactly once per (sync, URI).

One *delivery* per (sync, dataset URI), a Redis hash (deliveries.py). The webhook creates
the deliveries and queues their first attempt in the same MULTI as the history write, so
a recorded success always has its deliveries; with no ``FIVETRAN_EVENTS_AIRFLOW_URL`` it
creates none (``replay --since`` forwards the past once forwarding is on). An attempt (an
RQ job run by ``fivetran-events worker``):

1. takes the delivery's lock (a lease: a dead worker's lock expires) and sets its
   ``due`` time to the end of the lease, so if this worker dies the sweeper queues the
   delivery again;
2. returns without posting if it started before the delivery's next attempt is due (a
   backoff, a Retry-After) or before an earlier POST of unknown outcome can no longer
   land (see ``settles_at``);
3. if an earlier attempt left an in-flight mark (it may have POSTed and died, or timed
   out), looks the event up in Airflow by asset, time and ``extra.sync_id``; found:
   delivered, nothing posted;
4. otherwise writes the in-flight mark, POSTs, and records Airflow's event id.

Connection errors, timeouts, 5xx and 429 schedule a retry (exponential backoff with
jitter, at least the Retry-After, clamped into the retry window) until
``forward_retry_hours`` after receipt; 404 (no DAG uses the URI) records the delivery as
undelivered, any other 4xx as failed, each with the reason. Both are replayable. Retries
and lease expiries are due times in one sorted set; the worker's sweeper queues whatever
is due (never a second job while one is queued), so no RQ scheduler is needed and a
killed worker's delivery resumes.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.client import Pipeline
from redis.exceptions import LockError
from rq import Queue

from fivetran_events import Event, Settings
from fivetran_events.asset_extra import SyncRef, extra_for
from fivetran_events.keys import delivery_lock_key, due_key, undelivered_key
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
from .deliveries import (
    FINAL,
    GIVEN_UP,
    Delivery,
    DeliveryState,
    DeliveryStore,
    _s,
    attach_forwarding,
    forward_job_id,
)
from .replay import ReplayMixin

__all__ = [
    "FINAL",
    "FORWARD_JOB",
    "GIVEN_UP",
    "Delivery",
    "DeliveryState",
    "DeliveryStore",
    "Forwarder",
    "attach_forwarding",
    "forward_job_id",
]

log = logging.getLogger(__name__)

#: The dotted path of the job; a string, so the web process never imports the worker side.
FORWARD_JOB = "webhook_app.jobs.forward_sync"
#: Deliveries the sweeper queues per pass.
SWEEP_BATCH = 500
#: How long RQ keeps a finished attempt's result, and a failed one's traceback.
RESULT_TTL = 86_400
FAILURE_TTL = 7 * 86_400

# Queue ``id`` when it is due (score <= now), unless the RQ job last queued for it is still
# waiting in the queue; either way push its due time to the lease's end. One step, so two
# sweepers never both take the same delivery and a backlog never holds two jobs of one
# delivery. KEYS: due set, record. ARGV: id, now, new due, RQ job key prefix, new job id.
_CLAIM = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
local job = redis.call('HGET', KEYS[2], 'job')
if job and redis.call('HGET', ARGV[4] .. job, 'status') == 'queued' then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HSET', KEYS[2], 'job', ARGV[5])
end
return 1
"""


class Forwarder(ReplayMixin):
    """Make forwarding attempts, schedule retries, sweep due deliveries, replay."""

    def __init__(
        self,
        settings: Settings,
        client: redis.Redis,
        airflow: AirflowClient | None,
        queue: Queue,
        uri_map: UriMap,
        *,
        clock: Callable[[], int] = now_ms,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings
        self.redis = client
        self.airflow = airflow
        self.queue = queue
        self.uri_map = uri_map
        self.store = DeliveryStore(
            client, settings.key_prefix, int(settings.retention_days * 86_400)
        )
        self.clock = clock
        self.rng = rng
        # A lease outlives the longest attempt: a token, an asset lookup, an event lookup
        # and the POST, each up to a connect and a read timeout, a 401 doubling one. RQ
        # stops a job at the lease's end (job_timeout), so no request of an attempt is
        # sent after its lease.
        self.lease_ms = int(
            max(settings.forward_lease_seconds, 12 * settings.airflow_timeout_seconds) * 1000
        )
        self.margin_ms = int(settings.forward_unknown_outcome_seconds * 1000)
        self._claim = client.register_script(_CLAIM)

    @property
    def job_prefix(self) -> str:
        return str(self.queue.job_class.redis_job_namespace_prefix)

    # --- the webhook's side ----------------------------------------------------------------

    def enqueue(self, pipe: Pipeline, event: Event, received_ms: int | None = None) -> list[str]:
        """Create the deliveries of a successful sync and queue their first attempts.

        Runs inside the history write's MULTI block: all of it commits with the history
        or none of it does.
        """
        now = self.clock() if received_ms is None else received_ms
        ids = []
        for uri in self.uri_map.uris(
            event.connector_id, event.connector_name, event.connector_type, event.group_id
        ):
            job = forward_job_id(self.store.id_of(event, uri))
            did = self.store.create(pipe, event, uri, now, now + self.lease_ms, job)
            self._enqueue(did, pipe, job)
            ids.append(did)
        return ids

    def _enqueue(self, did: str, pipe: Pipeline | None, job_id: str) -> None:
        self.queue.enqueue(
            FORWARD_JOB,
            kwargs={"delivery": did},
            job_id=job_id,
            pipeline=pipe,
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
            job_timeout=int(self.lease_ms / 1000),
            description=f"forward {did}",
        )

    # --- the worker's side -----------------------------------------------------------------

    def attempt(self, did: str) -> dict[str, Any]:
        """Make one attempt at delivery ``did``; return what happened."""
        lock = self.redis.lock(
            delivery_lock_key(self.settings.key_prefix, did),
            timeout=self.lease_ms / 1000,
            blocking=False,
        )
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

    def settles_at(self, d: Delivery) -> int | None:
        """Return when an earlier POST of unknown outcome can no longer create an event.

        Airflow may commit a POST after the client gave up on it (a timeout, a reset after
        sending): until then a lookup that finds nothing proves nothing. ``unknown_ms`` is
        when an attempt gave up on such a POST; an attempt that died left only its mark
        (``inflight_ms``), and sent nothing after its lease ended. Either way Airflow gets
        ``forward_unknown_outcome_seconds`` more to finish what it received.
        """
        mark = d.ms("inflight_ms")
        if mark is None:
            return None
        unknown = d.ms("unknown_ms")
        gave_up = unknown if unknown is not None and unknown >= mark else mark + self.lease_ms
        return gave_up + self.margin_ms

    def not_before(self, d: Delivery) -> int | None:
        """Return the earliest time an attempt may talk to Airflow about ``d``."""
        times = [
            t
            for t in (
                self.settles_at(d),
                d.ms("next_attempt_ms") if d.state is DeliveryState.RETRYING else None,
            )
            if t is not None
        ]
        return max(times) if times else None

    def _attempt_locked(self, did: str) -> dict[str, Any]:
        d = self.store.get(did)
        due = due_key(self.settings.key_prefix)
        if d is None:
            self.redis.zrem(due, did)
            return {"delivery": did, "outcome": "missing"}
        if d.state in FINAL or d.get("event_id"):
            self.redis.zrem(due, did)
            return {"delivery": did, "outcome": f"already {d.state.value}"}
        if self.airflow is None:
            raise RuntimeError("forwarding needs FIVETRAN_EVENTS_AIRFLOW_URL")
        now = self.clock()
        wait_until = self.not_before(d)
        if wait_until is not None and now < wait_until:
            # A job that came early (a stale or extra one): the backoff stands.
            self.redis.zadd(due, {did: wait_until})
            metrics.FORWARD_OUTCOMES.labels(outcome="not_due").inc()
            return {"delivery": did, "outcome": "not due", "due_in_s": (wait_until - now) / 1000}
        key = self.store.key(did)
        extra = json.loads(d.get("extra") or "null") or self.build_extra(d)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(key, "attempts", 1)
            pipe.hsetnx(key, "first_attempt_ms", str(now))
            pipe.hset(
                key, mapping={"extra": json.dumps(extra, sort_keys=True), "updated_ms": str(now)}
            )
            pipe.zadd(due, {did: now + self.lease_ms})
            pipe.execute()
        mark = d.ms("inflight_ms")
        resolved = mark is None  # no earlier POST whose outcome is open
        posting = False
        try:
            if mark is not None:
                since = lookup_window_start(min(mark, d.ms("first_attempt_ms") or mark))
                found = self.airflow.find_event(
                    d.uri,
                    since,
                    {"sync_id": extra["sync_id"], "connector_id": extra["connector_id"]},
                )
                if found is not None:
                    return self._delivered(d, found, recovered=True)
                resolved = True  # looked after it settled: it never landed
            self.airflow.prepare(d.uri)  # token and asset id first: the mark is the POST's
            # The mark is durable before the POST: whoever finds it looks before posting.
            self._set_mark(key, inflight=self.clock())
            posting = True
            event = self.airflow.post_event(d.uri, extra)
            return self._delivered(d, event, recovered=False)
        except AssetNotFound as exc:  # no such asset: no event of it can exist either
            return self._give_up(d, DeliveryState.UNDELIVERED, str(exc), clear_mark=True)
        except AirflowRejected as exc:
            return self._give_up(d, DeliveryState.FAILED, str(exc), clear_mark=resolved)
        except AirflowUnavailable as exc:
            return self._retry(d, exc, self._after_failure(d, posting, exc.maybe_sent, resolved))
        except (ValueError, KeyError, TypeError) as exc:
            # A 2xx that is not Airflow's JSON (a proxy's error page, say): retry, in time.
            return self._retry(
                d,
                AirflowUnavailable(f"unexpected answer from Airflow: {type(exc).__name__}: {exc}"),
                self._after_failure(d, posting, True, resolved),
            )

    def _set_mark(self, key: str, inflight: int | None = None, unknown: int | None = None) -> None:
        with self.redis.pipeline(transaction=True) as pipe:
            if inflight is not None:
                pipe.hset(key, "inflight_ms", str(inflight))
                pipe.hdel(key, "unknown_ms")
            if unknown is not None:
                pipe.hset(key, "unknown_ms", str(unknown))
            pipe.execute()

    def _after_failure(
        self, d: Delivery, posting: bool, maybe_sent: bool, resolved: bool
    ) -> int | None:
        """Record what a failed attempt leaves open; return when it settles (or None)."""
        key = self.store.key(d.id)
        if posting and maybe_sent:
            now = self.clock()
            self._set_mark(key, unknown=now)
            return now + self.margin_ms
        if posting or resolved:  # nothing reached Airflow, or the old mark proved empty
            self.redis.hdel(key, "inflight_ms", "unknown_ms")
            return None
        return self.settles_at(d)  # the lookup failed: the earlier POST is still open

    def build_extra(self, d: Delivery) -> dict[str, Any]:
        """Build the event's ``extra`` from the delivery and the connector's history."""
        return extra_for(self.redis, self.settings.key_prefix, SyncRef.from_fields(d.fields))

    def _finish(self, d: Delivery, fields: dict[str, str], drop: list[str], given_up: bool) -> None:
        prefix = self.settings.key_prefix
        key = self.store.key(d.id)
        mapping: dict[Any, Any] = {**fields, "updated_ms": str(self.clock())}
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=mapping)
            if drop:
                pipe.hdel(key, *drop)
            pipe.zrem(due_key(prefix), d.id)
            if given_up:
                pipe.zadd(undelivered_key(prefix), {d.id: self.clock()})
            else:
                pipe.zrem(undelivered_key(prefix), d.id)
            pipe.execute()

    def _delivered(self, d: Delivery, event: AirflowEvent, recovered: bool) -> dict[str, Any]:
        self._finish(
            d,
            {
                "state": DeliveryState.DELIVERED.value,
                "event_id": str(event.id),
                "event_at": iso(event.timestamp) or "",
                # found in Airflow after an attempt died between POST and record
                "recovered": "1" if recovered else "0",
            },
            ["inflight_ms", "unknown_ms", "reason", "next_attempt_ms"],
            given_up=False,
        )
        received = d.ms("received_ms")
        if received is not None and not recovered:
            metrics.FORWARD_LATENCY.observe(max(0.0, event.timestamp.timestamp() - received / 1000))
        outcome = "recovered" if recovered else "delivered"
        metrics.FORWARD_OUTCOMES.labels(outcome=outcome).inc()
        log.info("delivery %s: %s as Airflow event %s", d.id, outcome, event.id)
        return {"delivery": d.id, "outcome": outcome, "event_id": event.id}

    def _give_up(
        self, d: Delivery, state: DeliveryState, reason: str, clear_mark: bool
    ) -> dict[str, Any]:
        drop = ["next_attempt_ms"] + (["inflight_ms", "unknown_ms"] if clear_mark else [])
        self._finish(d, {"state": state.value, "reason": reason}, drop, given_up=True)
        metrics.FORWARD_OUTCOMES.labels(outcome=state.value).inc()
        log.warning("delivery %s: %s: %s", d.id, state.value, reason)
        return {"delivery": d.id, "outcome": state.value, "reason": reason}

    def backoff_seconds(self, attempts: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter (half fixed, half random), at least Retry-After.

        A Retry-After that is not a number (NaN) is ignored; an infinite one stays
        infinite here and is clamped into the retry window by the caller.
        """
        s = self.settings
        ceiling = min(
            s.forward_backoff_max_seconds,
            s.forward_backoff_seconds * 2 ** min(max(attempts - 1, 0), 30),
        )
        delay = ceiling / 2 + self.rng() * ceiling / 2
        if retry_after is None or math.isnan(retry_after):
            return delay
        return max(delay, retry_after)

    def _retry(self, d: Delivery, exc: AirflowUnavailable, settles: int | None) -> dict[str, Any]:
        now = self.clock()
        attempts = int(self.redis.hget(self.store.key(d.id), "attempts") or 1)
        deadline = (d.ms("window_ms") or now) + int(self.settings.forward_retry_hours * 3_600_000)
        if now >= deadline:
            reason = (
                f"gave up after {attempts} attempts over "
                f"{self.settings.forward_retry_hours:g} h; last error: {exc}"
            )
            return self._give_up(d, DeliveryState.UNDELIVERED, reason, clear_mark=False)
        # Clamped into the window, so an absurd Retry-After still gets a last attempt.
        wait_ms = min(self.backoff_seconds(attempts, exc.retry_after) * 1000, deadline - now)
        at = max(now + int(wait_ms), settles or 0)
        prefix = self.settings.key_prefix
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                self.store.key(d.id),
                mapping={
                    "state": DeliveryState.RETRYING.value,
                    "reason": str(exc),
                    "next_attempt_ms": str(at),
                    "updated_ms": str(now),
                },
            )
            pipe.zadd(due_key(prefix), {d.id: at})
            pipe.execute()
        metrics.FORWARD_OUTCOMES.labels(outcome="retrying").inc()
        log.info("delivery %s: retry in %.1fs: %s", d.id, (at - now) / 1000, exc)
        return {
            "delivery": d.id,
            "outcome": "retrying",
            "retry_in_s": (at - now) / 1000,
            "reason": str(exc),
        }

    def sweep(self, now: int | None = None, limit: int = SWEEP_BATCH) -> int:
        """Queue an attempt for every delivery that is due; return how many were queued."""
        now = self.clock() if now is None else now
        due = due_key(self.settings.key_prefix)
        ids = [_s(m) or "" for m in self.redis.zrangebyscore(due, "-inf", now, start=0, num=limit)]
        queued = 0
        for did in ids:
            job = forward_job_id(did, now)
            if self._claim(
                keys=[due, self.store.key(did)],
                args=[did, now, now + self.lease_ms, self.job_prefix, job],
            ):
                self._enqueue(did, None, job)
                queued += 1
        return queued
