"""Prometheus metrics: each process's counters, and gauges read from Redis at scrape time.

The gauges cost three round trips that grow with the number of connectors only; a Redis
error yields ``fivetran_events_gauges_up 0``, not a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fivetran_events.deliveries import INDEXED
from fivetran_events.freshness import Freshness
from fivetran_events.history import HistoryReader
from fivetran_events.keys import (
    delivery_state_key,
    due_key,
    reconcile_key,
    undelivered_key,
)
from fivetran_events.timeutil import now_ms, parse_iso, to_ms

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # prometheus_client opens its files there as soon as a metric is created.
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

DELIVERIES = Counter(
    "fivetran_events_webhook_deliveries",
    "Webhook deliveries by outcome (recorded, duplicate, ignored, invalid, unauthorized, "
    "too_large, unavailable).",
    ["outcome"],
)
LATENCY = Histogram(
    "fivetran_events_webhook_seconds",
    "Time from receiving a webhook delivery to answering it.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)

SYNC_END_STATUSES = Counter(
    "fivetran_events_sync_end_statuses",
    "Recorded sync_end deliveries by Fivetran's status, verbatim; statuses the service "
    "does not know are non-completions (neither success nor failure), and past "
    "20 distinct unknown ones a process counts the rest as OTHER_UNKNOWN.",
    ["status"],
)

DROPPED_FIELDS = Counter(
    "fivetran_events_webhook_dropped_fields",
    "Optional fields of known events left out for a shape nobody documents (data.tables "
    "as an object, data as a list, ...): the delivery is taken without them.",
    ["field"],
)

#: Every outcome the webhook counts, each series at 0 from the start: Prometheus's increase()
#: needs a sample before the first increment, or an alert misses a restart's first 503.
WEBHOOK_OUTCOMES = "recorded duplicate ignored invalid unauthorized too_large unavailable"
for _outcome in WEBHOOK_OUTCOMES.split():
    DELIVERIES.labels(outcome=_outcome)
for _status in ("SUCCESSFUL", "FAILURE", "FAILURE_WITH_TASK", "FAILED", "RESCHEDULED", "CANCELED"):
    SYNC_END_STATUSES.labels(status=_status)


#: Labels naming a connector, group or webhook: an unauthenticated scrape gets none (probes.py).
NAMING_LABELS = frozenset({"connector", "connector_id", "connector_name", "group_id"})
NAMING_LABELS |= {"webhook_id", "url"}


class Anonymous:
    """A registry's metrics without the series that carry a ``NAMING_LABELS`` label."""

    def __init__(self, registry: Collector) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            samples = [s for s in family.samples if not NAMING_LABELS & s.labels.keys()]
            if family.samples and not samples:
                continue  # every series named something: the family goes too
            family.samples = samples
            yield family


def render(*scrape_time: Collector, named: bool = True) -> tuple[bytes, str]:
    """Return the exposition text of every metric (all gunicorn workers when multiprocess),
    without the series that name connectors or webhooks unless ``named``; ``scrape_time``
    collectors belong to one app's Redis, so are never registered globally."""
    extra = CollectorRegistry()
    for collector in scrape_time:
        extra.register(collector)
    registry: CollectorRegistry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    parts: list[Collector] = [registry, extra]
    if not named:
        parts = [Anonymous(part) for part in parts]
    return b"".join(generate_latest(part) for part in parts), CONTENT_TYPE_LATEST


FORWARD_OUTCOMES = Counter(
    "fivetran_events_forward_attempts",
    "Attempts to forward a successful sync to an Airflow dataset, by outcome (delivered, "
    "recovered: found already in Airflow after a crash, retrying, undelivered, failed, busy).",
    ["outcome"],
)
for _outcome in ("delivered", "recovered", "retrying", "undelivered", "failed", "busy"):
    FORWARD_OUTCOMES.labels(outcome=_outcome)  # at 0 from the start, as the webhook's are
FORWARD_LATENCY = Histogram(
    "fivetran_events_forward_latency_seconds",
    "Time from the webhook's receipt of a successful sync_end to Airflow creating its "
    "dataset event (Airflow's own event timestamp).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0, 86_400.0),
)
PARTITIONS_SKIPPED = Counter(
    "fivetran_events_partitions_skipped",
    "Partition keys a sync completed beyond FIVETRAN_EVENTS_PARTITION_MAX_KEYS, not "
    "posted (logged with their range; replay --partitions posts them).",
)
FORWARD_REQUEST_SECONDS = Histogram(
    "fivetran_events_forward_attempt_seconds",
    "Time one forwarding attempt spent talking to Airflow.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)


RECONCILED = Counter(
    "fivetran_events_reconciled",
    "Completions Fivetran's REST API reported that the webhook never delivered, recorded "
    "by reconcile (fivetran_events/reconcile.py), by connector; past 500 distinct "
    "connectors a process counts the rest as OTHER.",
    ["connector"],
)
#: Connector labels of RECONCILED per process: an account's are bounded, a hostile id list not.
RECONCILED_CONNECTORS_CAP = 500
_reconciled_seen: set[str] = set()


def count_reconciled(connector_id: str) -> None:
    """Count one reconciled completion of ``connector_id`` (capped)."""
    if connector_id not in _reconciled_seen and len(_reconciled_seen) >= RECONCILED_CONNECTORS_CAP:
        connector_id = "OTHER"
    else:
        _reconciled_seen.add(connector_id)
    RECONCILED.labels(connector=connector_id).inc()


#: The states an on-call person acts on, each with an index of its own in Redis: a count
#: is one ZCARD and the oldest one ZRANGE 0 0, however many deliveries there are.
STATES = tuple(s.value for s in INDEXED)


@dataclass
class Snapshot:
    """What one scrape read, turned into metric families by ``families``."""

    now: int
    due: int = 0
    given_up: int = 0
    overdue_ms: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATES, 0))
    oldest_received: dict[str, int] = field(default_factory=dict)
    #: connector id -> (name, type, group)
    connectors: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    last_success: dict[str, int] = field(default_factory=dict)
    #: connector id -> ms past its due time (0: on time), for connectors with an objective
    overdue: dict[str, int] = field(default_factory=dict)
    #: connector id -> (succeeded, Fivetran's status) of its newest completion
    last_status: dict[str, tuple[bool, str]] = field(default_factory=dict)
    last_webhook: int | None = None
    #: The last reconcile's stored outcome (fivetran_events/reconcile.py), if one ran.
    reconcile: dict[str, Any] | None = None

    def families(self) -> Iterator[Metric]:
        """Yield the gauges (ages in seconds, computed against the scrape's clock)."""

        def age(ms: int) -> float:
            return max(0.0, (self.now - ms) / 1000)

        def gauge(name: str, doc: str, labels: list[str], samples: Iterable[Any]) -> Metric:
            family = GaugeMetricFamily(f"fivetran_events_{name}", doc, labels=labels)
            for *values, value in samples:
                family.add_metric(values, value)
            return family

        yield gauge(
            "forward_deliveries",
            "Deliveries to Airflow by state: pending (queued or in an attempt), retrying, "
            "undelivered (404 or retries ran out) and failed (Airflow refused it).",
            ["state"],
            ((state, self.counts[state]) for state in STATES),
        )
        yield gauge(
            "forward_oldest_delivery_age_seconds",
            "Seconds since the oldest delivery in each state was received (or last replayed).",
            ["state"],
            ((state, age(ms)) for state, ms in sorted(self.oldest_received.items())),
        )
        yield GaugeMetricFamily(
            "fivetran_events_forward_due_deliveries",
            "Deliveries waiting for an attempt or a retry (the due queue's depth).",
            value=self.due,
        )
        yield GaugeMetricFamily(
            "fivetran_events_forward_given_up_deliveries",
            "Deliveries given up (undelivered or failed), waiting for a replay.",
            value=self.given_up,
        )
        yield GaugeMetricFamily(
            "fivetran_events_forward_overdue_seconds",
            "How far past its due time the most overdue delivery is (0: none is late); "
            "grows when no worker sweeps the due queue.",
            value=max(0, self.overdue_ms) / 1000,
        )
        yield gauge(
            "connector_info",
            "Known connectors (value 1) and their names.",
            ["connector_id", "connector_name", "connector_type", "group_id"],
            ((cid, *names, 1) for cid, names in sorted(self.connectors.items())),
        )
        yield gauge(
            "connector_seconds_since_success",
            "Seconds since the connector's newest successful sync ended.",
            ["connector_id"],
            ((cid, age(ms)) for cid, ms in sorted(self.last_success.items())),
        )
        yield gauge(
            "connector_overdue_seconds",
            "Seconds the connector is past its due time (its last success plus Fivetran's "
            "sync_frequency and a grace, or its explicit objective); 0 when on time. Only "
            "connectors with an objective: not manual, paused or never synced.",
            ["connector_id"],
            ((cid, ms / 1000) for cid, ms in sorted(self.overdue.items())),
        )
        yield gauge(
            "connector_last_sync_succeeded",
            "1 if the connector's newest completed sync succeeded, 0 if it failed; "
            "status is Fivetran's.",
            ["connector_id", "status"],
            ((cid, text, int(ok)) for cid, (ok, text) in sorted(self.last_status.items())),
        )
        if self.reconcile is not None:
            hooks = self.reconcile.get("inactive_webhooks") or []
            yield gauge(
                "fivetran_webhooks_inactive",
                "Webhooks Fivetran reported inactive at the last reconcile (it delivers "
                "nothing to them); one series per webhook with its id and URL.",
                ["webhook_id", "url"],
                ((str(hook.get("id")), str(hook.get("url")), 1) for hook in hooks),
            )
            yield GaugeMetricFamily(
                "fivetran_events_fivetran_inactive_webhooks",
                "How many webhooks Fivetran reported inactive at the last reconcile.",
                value=len(hooks),
            )
            finished = self.reconcile.get("finished_at")
            if isinstance(finished, str):
                yield GaugeMetricFamily(
                    "fivetran_events_seconds_since_reconcile",
                    "Seconds since the last reconcile against Fivetran's REST API finished.",
                    value=age(to_ms(parse_iso(finished))),
                )
        if self.last_webhook is not None:
            yield GaugeMetricFamily(
                "fivetran_events_seconds_since_last_webhook",
                "Seconds since the newest recorded event (its Fivetran time); test "
                "deliveries do not count.",
                value=age(self.last_webhook),
            )


class RedisGauges(Collector):
    """A prometheus_client collector reading the shared state at scrape time."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        clock: Callable[[], int] = now_ms,
        freshness: Freshness | None = None,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.clock = clock
        self.freshness = freshness or Freshness()

    def collect(self) -> Iterator[Metric]:
        try:
            snapshot = self.read()
        except redis.RedisError:
            up = 0
        else:
            up = 1
            yield from snapshot.families()
        yield GaugeMetricFamily(
            "fivetran_events_gauges_up",
            "1 if this scrape could read the Redis gauges, 0 if Redis did not answer.",
            value=up,
        )

    def read(self) -> Snapshot:
        """Read everything in three pipelined round trips (see the module docstring)."""
        p = self.prefix
        snap = Snapshot(now=self.clock())
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(due_key(p))
        pipe.zcard(undelivered_key(p))
        pipe.zrange(due_key(p), 0, 0, withscores=True)
        for state in STATES:
            pipe.zcard(delivery_state_key(p, state))
            pipe.zrange(delivery_state_key(p, state), 0, 0, withscores=True)
        pipe.get(reconcile_key(p))
        snap.due, snap.given_up, first_due, *by_state, outcome = pipe.execute()
        if outcome is not None:
            with contextlib.suppress(ValueError):
                parsed = json.loads(outcome)
                snap.reconcile = parsed if isinstance(parsed, dict) else None
        if first_due:
            snap.overdue_ms = snap.now - int(first_due[0][1])
        for i, state in enumerate(STATES):
            count, oldest = by_state[2 * i : 2 * i + 2]
            snap.counts[state] = int(count)
            if oldest:
                snap.oldest_received[state] = int(oldest[0][1])
        # The running sync is not a gauge: any duration will do for the reader.
        reader = HistoryReader(self.client, p, 0, self.freshness)
        newest_event: list[int] = []
        for rec, (ok, fail, _) in reader.newest_of(reader.connector_ids()):
            cid = rec.connector_id
            snap.connectors[cid] = (rec.name or "", rec.type or "", rec.group or "")
            if ok:
                snap.last_success[cid] = ok.ended_ms
                due = self.freshness.due_ms(rec, ok.ended_ms)
                if due is not None:
                    snap.overdue[cid] = max(0, snap.now - due)
            # At the same millisecond a success counts as the later one, as in decide().
            newest = max(
                (c for c in (ok, fail) if c is not None),
                default=None,
                key=lambda c: (c.ended_ms, c.succeeded),
            )
            if newest is not None:
                snap.last_status[cid] = (newest.succeeded, newest.status)
            if rec.last_event_at:
                newest_event.append(to_ms(parse_iso(rec.last_event_at)))
        snap.last_webhook = max(newest_event, default=None)
        return snap
