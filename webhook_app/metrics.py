"""Prometheus metrics of the webhook server.

Under gunicorn each worker is a process: set ``PROMETHEUS_MULTIPROC_DIR`` (``fivetran-events
serve`` does) and /metrics aggregates every worker's samples.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.registry import Collector

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


#: Every outcome the webhook counts. Each series exists at 0 from the start: Prometheus's
#: increase() needs a sample before the first increment, or an alert on the first 503
#: after a restart would never see it.
WEBHOOK_OUTCOMES = (
    "recorded",
    "duplicate",
    "ignored",
    "invalid",
    "unauthorized",
    "too_large",
    "unavailable",
)
for _outcome in WEBHOOK_OUTCOMES:
    DELIVERIES.labels(outcome=_outcome)
for _status in ("SUCCESSFUL", "FAILURE", "FAILURE_WITH_TASK", "FAILED", "RESCHEDULED", "CANCELED"):
    SYNC_END_STATUSES.labels(status=_status)


def render(*scrape_time: Collector) -> tuple[bytes, str]:
    """Return the exposition text of every metric (all gunicorn workers when multiprocess).

    ``scrape_time`` collectors (webhook_app.gauges) are read per call, never registered
    globally: they belong to one app's Redis.
    """
    extra = CollectorRegistry()
    for collector in scrape_time:
        extra.register(collector)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry) + generate_latest(extra), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY) + generate_latest(extra), CONTENT_TYPE_LATEST


# --- Forwarding to Airflow -------------------------------------------------------------

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
FORWARD_REQUEST_SECONDS = Histogram(
    "fivetran_events_forward_attempt_seconds",
    "Time one forwarding attempt spent talking to Airflow.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)


# --- Reconciling against Fivetran's REST API -------------------------------------------

RECONCILED = Counter(
    "fivetran_events_reconciled",
    "Completions Fivetran's REST API reported that the webhook never delivered, recorded "
    "by reconcile (fivetran_events/reconcile.py), by connector; past 500 distinct "
    "connectors a process counts the rest as OTHER.",
    ["connector"],
)
#: Distinct connector labels one process gives RECONCILED before it counts the rest as
#: OTHER: an account's connectors are bounded, a bug or a hostile id list is not.
RECONCILED_CONNECTORS_CAP = 500
_reconciled_seen: set[str] = set()


def count_reconciled(connector_id: str) -> None:
    """Count one reconciled completion of ``connector_id`` (capped, see above)."""
    if connector_id not in _reconciled_seen and len(_reconciled_seen) >= RECONCILED_CONNECTORS_CAP:
        connector_id = "OTHER"
    else:
        _reconciled_seen.add(connector_id)
    RECONCILED.labels(connector=connector_id).inc()
