"""One attempt at a delivery: lease, settle an open POST, post, record; or retry later.

An attempt (an RQ job run by ``fivetran-events worker``):

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

Connection errors, timeouts, 5xx, 429 and answers that are not Airflow's JSON (the
client classifies them all as ``AirflowUnavailable``) schedule a retry (exponential
backoff with jitter, at least the Retry-After up to ``max_retry_after_seconds``,
clamped into the retry window) until
``forward_retry_hours`` after receipt; 404 (no DAG uses the URI) records the delivery as
undelivered, any other 4xx as failed, each with the reason. Anything else is a bug of
ours: it fails the RQ job visibly (the lease makes the sweeper try again) instead of
being retried quietly for the whole window.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Protocol

import redis
from redis.exceptions import LockError

from fivetran_events import Settings
from fivetran_events.asset_extra import SyncRef, extra_for
from fivetran_events.deliveries import FINAL, Delivery, DeliveryState
from fivetran_events.http import RetryableError
from fivetran_events.keys import delivery_lock_key, due_key, undelivered_key
from fivetran_events.timeutil import iso

from .. import metrics
from ..airflow_client import AirflowClient, AirflowEvent, lookup_window_start
from ..airflow_errors import AirflowRejected, AirflowUnavailable, AssetNotFound
from ..lineage import is_lineage
from .enqueue import TABLES_SCHEME
from .store import DeliveryStore

log = logging.getLogger(__name__)


class Parts(Protocol):
    """What an attempt works with: ``worker.Forwarder`` (its clock and jitter are read at
    each call, so a test can swap them)."""

    settings: Settings
    redis: redis.Redis
    store: DeliveryStore
    airflow: AirflowClient | None
    #: The OpenLineage sender (``forwarding/lineage.LineageSender``); None: lineage off.
    lineage: Any
    clock: Callable[[], int]
    rng: Callable[[], float]
    lease_ms: int
    margin_ms: int
    keep_ms: int
    record_ttl_ms: int


class AttemptOutcome(str, Enum):
    """What one attempt did (its RQ job's result; ``forward_outcomes_total``'s label)."""

    BUSY = "busy"  # another attempt holds the lease
    MISSING = "missing"  # no such delivery (expired, or never created)
    FINAL = "final"  # already delivered, undelivered or failed: nothing to do
    NOT_DUE = "not due"  # came before the backoff or an open POST settles
    DELIVERED = "delivered"
    RECOVERED = "recovered"  # found in Airflow after an attempt died between POST and record
    RETRYING = "retrying"
    UNDELIVERED = "undelivered"
    FAILED = "failed"


@dataclass(frozen=True)
class AttemptResult:
    """What one attempt did, with the details its outcome has."""

    delivery: str
    outcome: AttemptOutcome
    event_id: int | None = None
    reason: str | None = None
    #: Seconds until the delivery is due again (NOT_DUE and RETRYING).
    due_in_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The RQ job's stored result (plain JSON-able values, absent details left out)."""
        out = {k: v for k, v in asdict(self).items() if v is not None}
        out["outcome"] = self.outcome.value
        return out


def build_extra(fw: Parts, d: Delivery) -> dict[str, Any]:
    """Build the event's ``extra`` from the history (``fivetran_events.asset_extra``)."""
    return extra_for(fw.redis, fw.settings.key_prefix, SyncRef.from_fields(d.fields))


def attempt(
    fw: Parts, did: str, expand: Callable[[Any, Delivery], AttemptResult] | None = None
) -> AttemptResult:
    """Make one attempt at delivery ``did``; return what happened.

    ``expand`` makes the attempt of a sync's table-level delivery (``tables.expand``),
    under the same lease.
    """
    lock = fw.redis.lock(
        delivery_lock_key(fw.settings.key_prefix, did),
        timeout=fw.lease_ms / 1000,
        blocking=False,
    )
    if not lock.acquire():
        metrics.FORWARD_OUTCOMES.labels(outcome="busy").inc()
        return AttemptResult(did, AttemptOutcome.BUSY)
    started = time.perf_counter()
    try:
        return _attempt_locked(fw, did, expand)
    finally:
        metrics.FORWARD_REQUEST_SECONDS.observe(time.perf_counter() - started)
        try:
            lock.release()
        except LockError:  # the lease ran out; whoever holds it now goes on
            log.warning("delivery %s: lease expired during the attempt", did)


def settles_at(fw: Parts, d: Delivery) -> int | None:
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
    gave_up = unknown if unknown is not None and unknown >= mark else mark + fw.lease_ms
    return gave_up + fw.margin_ms


def not_before(fw: Parts, d: Delivery) -> int | None:
    """Return the earliest time an attempt may talk to Airflow about ``d``."""
    times = [
        t
        for t in (
            settles_at(fw, d),
            d.ms("next_attempt_ms") if d.state is DeliveryState.RETRYING else None,
        )
        if t is not None
    ]
    return max(times) if times else None


def _attempt_locked(
    fw: Parts, did: str, expand: Callable[[Any, Delivery], AttemptResult] | None = None
) -> AttemptResult:
    d = fw.store.get(did)
    due = due_key(fw.settings.key_prefix)
    if d is None or d.state in FINAL or d.get("event_id"):
        with fw.redis.pipeline(transaction=True) as pipe:
            if d is None:
                fw.store.forget(pipe, did)
            else:
                pipe.zrem(due, did)
                fw.store.index_state(pipe, d, d.state)
                if d.state in FINAL:  # a redelivery's creation renewed its life: back to final
                    fw.store.expire(pipe, d, final_ttl_ms(fw, d.state, d, fw.clock()))
            pipe.execute()
        if d is None:
            return AttemptResult(did, AttemptOutcome.MISSING)
        return AttemptResult(did, AttemptOutcome.FINAL, reason=f"already {d.state.value}")
    if is_lineage(d.uri):  # an OpenLineage event, not an Airflow dataset (lineage.py)
        if fw.lineage is None:
            raise RuntimeError(
                "an OpenLineage delivery, but this worker sends no lineage: set "
                "OPENLINEAGE_URL (or FIVETRAN_EVENTS_LINEAGE=on with an openlineage.yml)"
            )
        # The sender attempts it (forwarding/lineage.py, which uses this module's
        # outcomes): this module never imports the OpenLineage client.
        return fw.lineage.attempt(fw, d)  # type: ignore[no-any-return]
    if fw.airflow is None:
        raise RuntimeError("forwarding needs FIVETRAN_EVENTS_AIRFLOW_URL")
    airflow = fw.airflow
    now = fw.clock()
    wait_until = not_before(fw, d)
    if wait_until is not None and now < wait_until:
        # A job that came early (a stale or extra one): the backoff stands.
        fw.redis.zadd(due, {did: wait_until})
        metrics.FORWARD_OUTCOMES.labels(outcome="not_due").inc()
        return AttemptResult(did, AttemptOutcome.NOT_DUE, due_in_s=(wait_until - now) / 1000)
    if expand is not None and d.uri.startswith(TABLES_SCHEME):
        return expand(fw, d)
    key = fw.store.key(did)
    extra = json.loads(d.get("extra") or "null") or build_extra(fw, d)
    with fw.redis.pipeline(transaction=True) as pipe:
        pipe.hincrby(key, "attempts", 1)
        pipe.hsetnx(key, "first_attempt_ms", str(now))
        pipe.hset(key, mapping={"extra": json.dumps(extra, sort_keys=True), "updated_ms": str(now)})
        pipe.zadd(due, {did: now + fw.lease_ms})
        pipe.execute()
    mark = d.ms("inflight_ms")
    resolved = mark is None  # no earlier POST whose outcome is open
    posting = False
    try:
        if mark is not None:
            since = lookup_window_start(min(mark, d.ms("first_attempt_ms") or mark))
            found = airflow.find_event(
                d.uri,
                since,
                {"sync_id": extra["sync_id"], "connector_id": extra["connector_id"]},
            )
            if found is not None:
                return _delivered(fw, d, found, recovered=True)
            resolved = True  # looked after it settled: it never landed
        t0 = time.perf_counter()
        airflow.prepare(d.uri)  # token and asset id first: the mark is the POST's
        t1 = time.perf_counter()
        # The mark is durable before the POST: whoever finds it looks before posting.
        _mark_inflight(fw, key)
        posting = True
        t2 = time.perf_counter()
        event = airflow.post_event(d.uri, extra)
        # Where a slow delivery's time went, in its log line: lookups, our mark, the POST.
        took = f"prepare {_ms(t1 - t0)}, mark {_ms(t2 - t1)}, POST {_ms(time.perf_counter() - t2)}"
        return _delivered(fw, d, event, recovered=False, took=took)
    except AssetNotFound as exc:  # no such asset: no event of it can exist either
        return _give_up(fw, d, DeliveryState.UNDELIVERED, str(exc), clear_mark=True)
    except AirflowRejected as exc:
        return _give_up(fw, d, DeliveryState.FAILED, str(exc), clear_mark=resolved)
    except (AirflowUnavailable, ReplicasShort) as exc:
        return _retry(fw, d, exc, _after_failure(fw, d, posting, exc.maybe_sent, resolved))


class ReplicasShort(RetryableError):
    """Too few replicas confirmed the in-flight mark in time: nothing was posted."""

    maybe_sent = False


def _mark_inflight(fw: Parts, key: str) -> None:
    """Write the in-flight mark a POST leaves open (``settles_at``), before the POST.

    With ``FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS`` = n, also wait until n replicas hold it
    (``WAIT`` after the writes, on their connection, as the webhook waits for a delivery):
    a failover then cannot promote a replica that never heard of an attempt whose POST
    may have landed, and post the same event again after the lease. Fewer in time raise
    ``ReplicasShort``: the POST is not sent and the attempt is retried.
    """
    wanted = fw.settings.redis_wait_replicas
    if wanted == 0:
        _set_mark(fw, key, inflight=fw.clock())
        return
    timeout_ms = fw.settings.redis_wait_timeout_ms
    with fw.redis.pipeline(transaction=False) as pipe:  # one connection; WAIT not in MULTI
        pipe.hset(key, "inflight_ms", str(fw.clock()))
        pipe.hdel(key, "unknown_ms")
        pipe.wait(wanted, timeout_ms)
        confirmed = int(pipe.execute()[-1])
    if confirmed < wanted:
        raise ReplicasShort(
            f"only {confirmed} of {wanted} Redis replicas confirmed the attempt's mark within "
            f"{timeout_ms} ms (FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS); nothing was posted"
        )


def _set_mark(fw: Parts, key: str, inflight: int | None = None, unknown: int | None = None) -> None:
    with fw.redis.pipeline(transaction=True) as pipe:
        if inflight is not None:
            pipe.hset(key, "inflight_ms", str(inflight))
            pipe.hdel(key, "unknown_ms")
        if unknown is not None:
            pipe.hset(key, "unknown_ms", str(unknown))
        pipe.execute()


def _after_failure(
    fw: Parts, d: Delivery, posting: bool, maybe_sent: bool, resolved: bool
) -> int | None:
    """Record what a failed attempt leaves open; return when it settles (or None)."""
    key = fw.store.key(d.id)
    if posting and maybe_sent:
        now = fw.clock()
        _set_mark(fw, key, unknown=now)
        return now + fw.margin_ms
    if posting or resolved:  # nothing reached Airflow, or the old mark proved empty
        fw.redis.hdel(key, "inflight_ms", "unknown_ms")
        return None
    return settles_at(fw, d)  # the lookup failed: the earlier POST is still open


def _finish(
    fw: Parts, d: Delivery, state: DeliveryState, fields: dict[str, str], drop: list[str]
) -> None:
    """Record a final ``state``: the record, the due set, the given-up set and the index.

    Its expiry in the same MULTI: a delivered record stays the keep time (a late
    redelivery still finds it and forwards nothing), one given up stays until its retry
    window plus the keep time are over (what an operator replays).
    """
    prefix = fw.settings.key_prefix
    key = fw.store.key(d.id)
    now = fw.clock()
    mapping: dict[str, str] = {"state": state.value, **fields, "updated_ms": str(now)}
    given_up = undelivered_key(prefix)
    with fw.redis.pipeline(transaction=True) as pipe:
        pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
        if drop:
            pipe.hdel(key, *drop)
        pipe.zrem(due_key(prefix), d.id)
        if state is DeliveryState.DELIVERED:
            pipe.zrem(given_up, d.id)
        else:
            pipe.zadd(given_up, {d.id: now})
            pipe.zremrangebyscore(given_up, "-inf", f"({now - fw.record_ttl_ms}")
        fw.store.expire(pipe, d, final_ttl_ms(fw, state, d, now))
        fw.store.index_state(pipe, d, state)
        pipe.execute()


def final_ttl_ms(fw: Parts, state: DeliveryState, d: Delivery, now: int) -> int:
    """Return how long a record in a final ``state`` stays from ``now``.

    Delivered: the keep time. Given up: until its retry window plus the keep time are
    over, and at least the keep time. A delivered table's record (``tables.py``: it has
    a ``table``) stays ``table_keep_ms`` only: its sync's table-level delivery, kept the
    keep time, is what a late redelivery or a replay finds.
    """
    if state is DeliveryState.DELIVERED:
        return table_keep_ms(fw) if d.get("table") else fw.keep_ms
    return max(d.window_ms + fw.record_ttl_ms - now, fw.keep_ms)


def table_keep_ms(fw: Parts) -> int:
    """How long a delivered table's record stays: past any re-run of its sync's expansion
    (a worker that died between creating the tables' deliveries and recording the
    expansion: its lease, then an attempt), at least an hour, at most the keep time."""
    return min(fw.keep_ms, max(3_600_000, 4 * (fw.lease_ms + fw.margin_ms)))


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _delivered(
    fw: Parts, d: Delivery, event: AirflowEvent, recovered: bool, took: str = ""
) -> AttemptResult:
    _finish(
        fw,
        d,
        DeliveryState.DELIVERED,
        {
            "event_id": str(event.id),
            "event_at": iso(event.timestamp) or "",
            # found in Airflow after an attempt died between POST and record
            "recovered": "1" if recovered else "0",
        },
        ["inflight_ms", "unknown_ms", "reason", "next_attempt_ms"],
    )
    received = d.ms("received_ms")
    if received is not None and not recovered:
        metrics.FORWARD_LATENCY.observe(max(0.0, event.timestamp.timestamp() - received / 1000))
    outcome = AttemptOutcome.RECOVERED if recovered else AttemptOutcome.DELIVERED
    metrics.FORWARD_OUTCOMES.labels(outcome=outcome.value).inc()
    log.info(
        "delivery %s: %s as Airflow event %s%s",
        d.id,
        outcome.value,
        event.id,
        f" ({took})" if took else "",
    )
    return AttemptResult(d.id, outcome, event_id=event.id)


def _give_up(
    fw: Parts, d: Delivery, state: DeliveryState, reason: str, clear_mark: bool
) -> AttemptResult:
    drop = ["next_attempt_ms"] + (["inflight_ms", "unknown_ms"] if clear_mark else [])
    _finish(fw, d, state, {"reason": reason}, drop)
    metrics.FORWARD_OUTCOMES.labels(outcome=state.value).inc()
    log.warning("delivery %s: %s: %s", d.id, state.value, reason)
    return AttemptResult(d.id, AttemptOutcome(state.value), reason=reason)


def backoff_seconds(fw: Parts, attempts: int, retry_after: float | None) -> float:
    """Exponential backoff with jitter (half fixed, half random), at least Retry-After.

    A Retry-After that is not a number (NaN) is ignored; one asking for more than
    ``max_retry_after_seconds`` (a huge number, infinity, a date in year 9999) gets that
    much, so one answer cannot postpone a delivery for the whole retry window.
    """
    s = fw.settings
    ceiling = min(
        s.forward_backoff_max_seconds,
        s.forward_backoff_seconds * 2.0 ** min(max(attempts - 1, 0), 30),
    )
    delay = ceiling / 2 + fw.rng() * ceiling / 2
    if retry_after is None or math.isnan(retry_after):
        return delay
    return max(delay, min(retry_after, s.max_retry_after_seconds))


def _retry(
    fw: Parts,
    d: Delivery,
    exc: RetryableError,
    settles: int | None,
) -> AttemptResult:
    now = fw.clock()
    attempts = int(fw.redis.hget(fw.store.key(d.id), "attempts") or 1)
    hours = fw.settings.forward_retry_hours
    deadline = (d.ms("window_ms") or now) + int(hours * 3_600_000)
    if now >= deadline:
        reason = f"gave up after {attempts} attempts over {hours:g} h; last error: {exc}"
        return _give_up(fw, d, DeliveryState.UNDELIVERED, reason, clear_mark=False)
    # Clamped into the window, so a long wait still gets a last attempt at its end.
    wait_ms = min(backoff_seconds(fw, attempts, exc.retry_after) * 1000, deadline - now)
    at = max(now + int(wait_ms), settles or 0)
    with fw.redis.pipeline(transaction=True) as pipe:
        pipe.hset(
            fw.store.key(d.id),
            mapping={
                "state": DeliveryState.RETRYING.value,
                "reason": str(exc),
                "next_attempt_ms": str(at),
                "updated_ms": str(now),
            },
        )
        pipe.zadd(due_key(fw.settings.key_prefix), {d.id: at})
        fw.store.index_state(pipe, d, DeliveryState.RETRYING)
        pipe.execute()
    metrics.FORWARD_OUTCOMES.labels(outcome="retrying").inc()
    log.info("delivery %s: retry in %.1fs: %s", d.id, (at - now) / 1000, exc)
    return AttemptResult(d.id, AttemptOutcome.RETRYING, reason=str(exc), due_in_s=(at - now) / 1000)
