"""The state changes of a delivery, which every sender records through one ``Recorder``.

An attempt begins (due again at its lease's end, should the worker die) and ends
delivered, retrying, or given up, each end one MULTI.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from fivetran_events import Settings
from fivetran_events.deliveries import FINAL, Delivery, DeliveryState
from fivetran_events.http import RetryableError
from fivetran_events.keys import due_key, undelivered_key
from fivetran_events.timeutil import now_ms

from .. import metrics
from .enqueue import keep_delivered_ms, lease_ms, record_ttl_ms
from .store import DeliveryStore

log = logging.getLogger(__name__)

#: The marks of a POST whose outcome is open (``asset.py``), dropped by every final state.
MARKS = ["inflight_ms", "unknown_ms"]


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


def backoff_seconds(
    settings: Settings, attempts: int, retry_after: float | None, jitter: float
) -> float:
    """Exponential backoff with ``jitter`` (0..1; half fixed, half random), at least
    Retry-After: NaN is ignored, and at most ``max_retry_after_seconds`` of it, so one
    answer cannot postpone a delivery for the whole retry window."""
    s = settings
    ceiling = min(
        s.forward_backoff_max_seconds,
        s.forward_backoff_seconds * 2.0 ** min(max(attempts - 1, 0), 30),
    )
    delay = ceiling / 2 + jitter * ceiling / 2
    if retry_after is None or math.isnan(retry_after):
        return delay
    return max(delay, min(retry_after, s.max_retry_after_seconds))


def retry_at(d: Delivery) -> int | None:
    """When a retrying delivery's next attempt is due (None: not retrying)."""
    return d.ms("next_attempt_ms") if d.state is DeliveryState.RETRYING else None


class Recorder:
    """Record what an attempt did to a delivery (clock and jitter read at each call)."""

    def __init__(
        self,
        settings: Settings,
        store: DeliveryStore,
        clock: Callable[[], int] = now_ms,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings
        self.store = store
        self.redis = store.client
        self.clock = clock
        self.rng = rng
        self.lease_ms = lease_ms(settings)
        self.margin_ms = int(settings.forward_unknown_outcome_seconds * 1000)
        self.keep_ms = keep_delivered_ms(settings)
        self.record_ttl_ms = record_ttl_ms(settings)
        self.due_key = due_key(settings.key_prefix)

    def begin(self, d: Delivery, extra: Any) -> int:
        """Count an attempt at ``d``, keep the ``extra`` it sends (so every attempt sends
        the same), and make ``d`` due at the lease's end; return the attempt's time."""
        key, now = self.store.key(d.id), self.clock()
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(key, "attempts", 1)
            pipe.hsetnx(key, "first_attempt_ms", str(now))
            pipe.hset(
                key, mapping={"extra": json.dumps(extra, sort_keys=True), "updated_ms": str(now)}
            )
            pipe.zadd(self.due_key, {d.id: now + self.lease_ms})
            pipe.execute()
        return now

    def not_due(self, d: Delivery, at: int) -> AttemptResult:
        """An attempt came before ``at`` (a stale or extra job): the delivery stays due then."""
        self.redis.zadd(self.due_key, {d.id: at})
        metrics.FORWARD_OUTCOMES.labels(outcome="not_due").inc()
        return AttemptResult(d.id, AttemptOutcome.NOT_DUE, due_in_s=(at - self.clock()) / 1000)

    def already_done(self, did: str, d: Delivery | None) -> AttemptResult:
        """An attempt at a delivery that is gone or final: tidy its indexes and due time,
        and give a final record (whose life a redelivery renewed) its final expiry again."""
        with self.redis.pipeline(transaction=True) as pipe:
            if d is None:
                self.store.forget(pipe, did)
            else:
                pipe.zrem(self.due_key, did)
                self.store.index_state(pipe, d, d.state)
                if d.state in FINAL:
                    self.store.expire(pipe, d, self.final_ttl_ms(d.state, d, self.clock()))
            pipe.execute()
        if d is None:
            return AttemptResult(did, AttemptOutcome.MISSING)
        return AttemptResult(did, AttemptOutcome.FINAL, reason=f"already {d.state.value}")

    def delivered(
        self,
        d: Delivery,
        fields: dict[str, str],
        note: str,
        *,
        outcome: AttemptOutcome = AttemptOutcome.DELIVERED,
        event_id: int | None = None,
        reason: str | None = None,
    ) -> AttemptResult:
        """Record ``d`` delivered with ``fields`` (what the receiver answered); log ``note``."""
        self._finish(d, DeliveryState.DELIVERED, fields, ["reason", "next_attempt_ms", *MARKS])
        metrics.FORWARD_OUTCOMES.labels(outcome=outcome.value).inc()
        log.info("delivery %s: %s %s", d.id, outcome.value, note)
        return AttemptResult(d.id, outcome, event_id=event_id, reason=reason)

    def give_up(
        self, d: Delivery, state: DeliveryState, reason: str, clear_mark: bool = True
    ) -> AttemptResult:
        """Record ``d`` given up in ``state`` (undelivered or failed), saying why; keep the
        marks (``clear_mark`` False) while an earlier POST's outcome is open."""
        drop = ["next_attempt_ms"] + (MARKS if clear_mark else [])
        self._finish(d, state, {"reason": reason}, drop)
        metrics.FORWARD_OUTCOMES.labels(outcome=state.value).inc()
        log.warning("delivery %s: %s: %s", d.id, state.value, reason)
        return AttemptResult(d.id, AttemptOutcome(state.value), reason=reason)

    def retry(self, d: Delivery, exc: RetryableError, settles: int | None = None) -> AttemptResult:
        """Schedule ``d``'s next attempt, or give it up once its retry window is over."""
        now = self.clock()
        key = self.store.key(d.id)
        attempts = int(self.redis.hget(key, "attempts") or 1)
        hours = self.settings.forward_retry_hours
        deadline = (d.ms("window_ms") or now) + int(hours * 3_600_000)
        if now >= deadline:
            reason = f"gave up after {attempts} attempts over {hours:g} h; last error: {exc}"
            return self.give_up(d, DeliveryState.UNDELIVERED, reason, clear_mark=False)
        # Clamped into the window, so a long wait still gets a last attempt at its end.
        wait_s = backoff_seconds(self.settings, attempts, exc.retry_after, self.rng())
        at = max(now + int(min(wait_s * 1000, deadline - now)), settles or 0)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                key,
                mapping={
                    "state": DeliveryState.RETRYING.value,
                    "reason": str(exc),
                    "next_attempt_ms": str(at),
                    "updated_ms": str(now),
                },
            )
            pipe.zadd(self.due_key, {d.id: at})
            self.store.index_state(pipe, d, DeliveryState.RETRYING)
            pipe.execute()
        metrics.FORWARD_OUTCOMES.labels(outcome="retrying").inc()
        due_in_s = (at - now) / 1000
        log.info("delivery %s: retry in %.1fs: %s", d.id, due_in_s, exc)
        return AttemptResult(d.id, AttemptOutcome.RETRYING, reason=str(exc), due_in_s=due_in_s)

    def final_ttl_ms(self, state: DeliveryState, d: Delivery, now: int) -> int:
        """Return how long a record in a final ``state`` stays from ``now``: delivered, the
        keep time (a delivered table's, ``table_keep_ms``: its sync's table-level delivery
        is what a redelivery finds); given up, until its window and the keep time are over."""
        if state is DeliveryState.DELIVERED:
            return self.table_keep_ms() if d.get("table") else self.keep_ms
        return max(d.window_ms + self.record_ttl_ms - now, self.keep_ms)

    def table_keep_ms(self) -> int:
        """How long a delivered table's record stays: past any re-run of its sync's
        expansion, at least an hour, at most the keep time."""
        return min(self.keep_ms, max(3_600_000, 4 * (self.lease_ms + self.margin_ms)))

    def _finish(
        self, d: Delivery, state: DeliveryState, fields: dict[str, str], drop: list[str]
    ) -> None:
        """Record a final ``state`` (record, due set, given-up set, index, expiry) in one MULTI."""
        key, now = self.store.key(d.id), self.clock()
        given_up = undelivered_key(self.settings.key_prefix)
        with self.redis.pipeline(transaction=True) as pipe:
            mapping = {"state": state.value, **fields, "updated_ms": str(now)}
            pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
            pipe.hdel(key, *drop)
            pipe.zrem(self.due_key, d.id)
            if state is DeliveryState.DELIVERED:
                pipe.zrem(given_up, d.id)
            else:
                pipe.zadd(given_up, {d.id: now})
                pipe.zremrangebyscore(given_up, "-inf", f"({now - self.record_ttl_ms}")
            self.store.expire(pipe, d, self.final_ttl_ms(state, d, now))
            self.store.index_state(pipe, d, state)
            pipe.execute()
