"""What an attempt did to a delivery, recorded through one ``Recorder`` by every sender: it
begins (due again at its lease's end, should the worker die) and ends delivered, retrying or
given up. The store writes; the backoff, metric and log line are decided here."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from fivetran_events import Settings
from fivetran_events.deliveries import Delivery, DeliveryState, Field
from fivetran_events.http import RetryableError, backoff
from fivetran_events.timeutil import now_ms

from .. import metrics
from .store import DeliveryStore

log = logging.getLogger(__name__)


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
    delay = backoff(attempts, s.forward_backoff_seconds, s.forward_backoff_max_seconds, jitter)
    if retry_after is None or math.isnan(retry_after):
        return delay
    return max(delay, min(retry_after, s.max_retry_after_seconds))


def retry_at(d: Delivery) -> int | None:
    """When a retrying delivery's next attempt is due (None: not retrying)."""
    return d.ms(Field.NEXT_ATTEMPT_MS) if d.state is DeliveryState.RETRYING else None


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
        self.lifetimes = store.lifetimes
        self.clock = clock
        self.rng = rng

    def begin(self, d: Delivery, extra: Any) -> int:
        """Count an attempt at ``d``, keeping the ``extra`` it sends; return its time."""
        now = self.clock()
        self.store.begin(d, extra, now)
        return now

    def not_due(self, d: Delivery, at: int) -> AttemptResult:
        """An attempt came before ``at`` (a stale or extra job): the delivery stays due then."""
        self.store.due_at(d.id, at)
        metrics.FORWARD_OUTCOMES.labels(outcome="not_due").inc()
        return AttemptResult(d.id, AttemptOutcome.NOT_DUE, due_in_s=(at - self.clock()) / 1000)

    def already_done(self, did: str, d: Delivery | None) -> AttemptResult:
        """An attempt at a delivery that is gone or final: tidy it away."""
        self.store.tidy(did, d, self.clock())
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
        self.store.delivered(d, fields, self.clock())
        metrics.FORWARD_OUTCOMES.labels(outcome=outcome.value).inc()
        log.info("delivery %s: %s %s", d.id, outcome.value, note)
        return AttemptResult(d.id, outcome, event_id=event_id, reason=reason)

    def give_up(
        self, d: Delivery, state: DeliveryState, reason: str, clear_mark: bool = True
    ) -> AttemptResult:
        """Record ``d`` given up in ``state``, saying why; ``clear_mark`` False: a POST is open."""
        self.store.give_up(d, state, reason, self.clock(), keep_marks=not clear_mark)
        metrics.FORWARD_OUTCOMES.labels(outcome=state.value).inc()
        log.warning("delivery %s: %s: %s", d.id, state.value, reason)
        return AttemptResult(d.id, AttemptOutcome(state.value), reason=reason)

    def retry(self, d: Delivery, exc: RetryableError, settles: int | None = None) -> AttemptResult:
        """Schedule ``d``'s next attempt, or give it up once its retry window is over."""
        now = self.clock()
        attempts = self.store.attempts(d)
        deadline = (d.ms(Field.WINDOW_MS) or now) + self.lifetimes.retry_window_ms
        if now >= deadline:
            hours = self.settings.forward_retry_hours
            reason = f"gave up after {attempts} attempts over {hours:g} h; last error: {exc}"
            return self.give_up(d, DeliveryState.UNDELIVERED, reason, clear_mark=False)
        # Clamped into the window, so a long wait still gets a last attempt at its end.
        wait_s = backoff_seconds(self.settings, attempts, exc.retry_after, self.rng())
        at = max(now + int(min(wait_s * 1000, deadline - now)), settles or 0)
        self.store.retry_at(d, at, str(exc), now)
        metrics.FORWARD_OUTCOMES.labels(outcome="retrying").inc()
        due_in_s = (at - now) / 1000
        log.info("delivery %s: retry in %.1fs: %s", d.id, due_in_s, exc)
        return AttemptResult(d.id, AttemptOutcome.RETRYING, reason=str(exc), due_in_s=due_in_s)
