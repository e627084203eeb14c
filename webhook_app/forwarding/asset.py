"""The sender of asset events: settle an open POST, post, record; or retry later.

An attempt waits until an earlier POST of unknown outcome can no longer land, looks its
event up in Airflow if one left its in-flight mark, else writes the mark and POSTs.
Anything but Airflow's classified errors is a bug of ours: it fails the RQ job visibly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress

from redis.exceptions import LockError

from fivetran_events.deliveries import Delivery, DeliveryState, Field, SyncRef, extra_for
from fivetran_events.keys import partition_turn_key
from fivetran_events.timeutil import iso

from .. import metrics
from ..airflow_client import AirflowClient, AirflowEvent, lookup_window_start
from ..exceptions import AirflowRejected, AirflowUnavailable, AssetNotFound, ReplicasShort
from .recorder import AttemptOutcome, AttemptResult, Recorder, retry_at


class AssetSender:
    """Post a delivery's asset event to Airflow, exactly once per (sync, URI) and, for a
    partitioned one, per (sync, partition key, URI)."""

    def __init__(self, recorder: Recorder, airflow: AirflowClient) -> None:
        self.recorder = recorder
        self.airflow = airflow
        self.redis = recorder.redis

    def settles_at(self, d: Delivery) -> int | None:
        """Return when an earlier POST of unknown outcome can no longer create an event: Airflow
        may commit a POST the client gave up on (until then a lookup finding nothing proves
        nothing), so from ``unknown_ms`` (or the lease's end, if the attempt died) it gets
        ``forward_unknown_outcome_seconds`` more."""
        mark = d.ms(Field.INFLIGHT_MS)
        if mark is None:
            return None
        unknown = d.ms(Field.UNKNOWN_MS)
        life = self.recorder.lifetimes
        gave_up = unknown if unknown is not None and unknown >= mark else mark + life.lease_ms
        return gave_up + life.margin_ms

    def not_before(self, d: Delivery) -> int | None:
        """Return the earliest time an attempt may talk to Airflow about ``d``."""
        times = [t for t in (self.settles_at(d), retry_at(d)) if t is not None]
        return max(times) if times else None

    def send(self, d: Delivery) -> AttemptResult:
        """Make ``d``'s attempt: look up an open POST's event, or post it (see the module)."""
        r = self.recorder
        extra = json.loads(d.get(Field.EXTRA) or "null") or extra_for(
            self.redis, r.settings.key_prefix, SyncRef.from_fields(d.fields)
        )
        r.begin(d, extra)
        partition = d.get(Field.PARTITION_KEY)  # None: the plain event
        mark = d.ms(Field.INFLIGHT_MS)
        resolved = mark is None  # no earlier POST whose outcome is open
        posting = False
        try:
            if mark is not None:
                since = lookup_window_start(min(mark, d.ms(Field.FIRST_ATTEMPT_MS) or mark))
                match = {"sync_id": extra["sync_id"], "connector_id": extra["connector_id"]}
                found = self.airflow.find_event(d.uri, since, match, partition)
                if found is not None:
                    return self._delivered(d, found, recovered=True)
                resolved = True  # looked after it settled: it never landed
            t0 = time.perf_counter()
            self.airflow.prepare(d.uri)  # token and asset id first: the mark is the POST's
            with nullcontext() if partition is None else self._turn(partition):
                t1 = time.perf_counter()
                # The mark is durable before the POST: whoever finds it looks before posting.
                self._mark_inflight(d)
                posting = True
                t2 = time.perf_counter()
                event = self.airflow.post_event(d.uri, extra, partition)
            # Where a slow delivery's time went, in its log line: lookups, our mark, the POST.
            took = (
                f"prepare {_ms(t1 - t0)}, mark {_ms(t2 - t1)}, POST {_ms(time.perf_counter() - t2)}"
            )
            return self._delivered(d, event, recovered=False, took=f" ({took})")
        except AssetNotFound as exc:  # no such asset: no event of it can exist either
            return r.give_up(d, DeliveryState.UNDELIVERED, str(exc))
        except AirflowRejected as exc:
            return r.give_up(d, DeliveryState.FAILED, str(exc), clear_mark=resolved)
        except (AirflowUnavailable, ReplicasShort) as exc:
            return r.retry(d, exc, self._after_failure(d, posting, exc.maybe_sent, resolved))

    @contextmanager
    def _turn(self, partition: str) -> Iterator[None]:
        """Take the partition key's turn (a lock, waited for up to the Airflow timeout) for the
        mark and the POST: Airflow 3.3 and 3.4 start a (DAG, key)'s pending run under a lock of
        the event's asset only, so two assets' events of one key committed together may start
        one each, and their AND never runs for the key (docs/partitions.md)."""
        s, lease = self.recorder.settings, self.recorder.lifetimes.lease_ms / 1000
        turn = self.redis.lock(partition_turn_key(s.key_prefix, partition), lease)
        held = turn.acquire(blocking_timeout=s.airflow_timeout_seconds)
        try:
            yield
        finally:
            if held:
                with suppress(LockError):  # the lease ran out: the next attempt may have begun
                    turn.release()

    def _delivered(
        self, d: Delivery, event: AirflowEvent, recovered: bool, took: str = ""
    ) -> AttemptResult:
        received = d.ms(Field.RECEIVED_MS)
        if received is not None and not recovered:
            metrics.FORWARD_LATENCY.observe(max(0.0, event.timestamp.timestamp() - received / 1000))
        fields = {
            Field.EVENT_ID: str(event.id),
            Field.EVENT_AT: iso(event.timestamp) or "",
            Field.RECOVERED: "1" if recovered else "0",
        }
        outcome = AttemptOutcome.RECOVERED if recovered else AttemptOutcome.DELIVERED
        note = f"as Airflow event {event.id}{took}"
        return self.recorder.delivered(d, fields, note, outcome=outcome, event_id=event.id)

    def _mark_inflight(self, d: Delivery) -> None:
        """Write the in-flight mark before the POST; with ``FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS``
        = n, WAIT until n replicas hold it, so a failover cannot promote a replica that never
        heard of a POST that may have landed (else ``ReplicasShort``: nothing is posted)."""
        settings = self.recorder.settings
        wanted = settings.redis_wait_replicas
        timeout_ms = settings.redis_wait_timeout_ms
        confirmed = self.recorder.store.mark_in_flight(d, self.recorder.clock(), wanted, timeout_ms)
        if confirmed < wanted:
            raise ReplicasShort(
                f"only {confirmed} of {wanted} Redis replicas confirmed the attempt's mark "
                f"within {timeout_ms} ms (FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS); nothing was posted"
            )

    def _after_failure(
        self, d: Delivery, posting: bool, maybe_sent: bool, resolved: bool
    ) -> int | None:
        """Record what a failed attempt leaves open; return when it settles (or None)."""
        r = self.recorder
        if posting and maybe_sent:
            now = r.clock()
            r.store.mark_unknown(d, now)
            return now + r.lifetimes.margin_ms
        if posting or resolved:  # nothing reached Airflow, or the old mark proved empty
            r.store.clear_marks(d)
            return None
        return self.settles_at(d)  # the lookup failed: the earlier POST is still open


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"
