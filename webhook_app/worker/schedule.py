"""The reconcile schedule: one RQ job per period, whichever worker queues it first, runs
``fivetran_events.reconcile`` and queues the next period's first."""

from __future__ import annotations

import logging
import math
from datetime import datetime, timezone

from rq import Queue

from fivetran_events import Settings, load_settings
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.keys import job_id_prefix, reconcile_period_key
from fivetran_events.reconcile import Outcome, reconcile
from fivetran_events.timeutil import iso, now_ms

from .. import metrics
from ..forwarding.enqueue import build_enqueuer
from .queue import RECONCILE_JOB, forward_queue

log = logging.getLogger(__name__)


def reconcile_job_id(settings: Settings, period: int) -> str:
    """RQ's id of the job of one period: the same period never gets two jobs."""
    return f"{job_id_prefix(settings.key_prefix)}reconcile-{period}"


def reconcile_enabled(settings: Settings) -> bool:
    return bool(
        settings.fivetran_api_key and settings.fivetran_api_secret and settings.reconcile_minutes
    )


def reconcile_run(settings: Settings, forward: bool = True) -> Outcome:
    """Reconcile once, with forwarding (when ``forward``), metrics and log lines."""
    client = settings.redis_client()
    enqueuer = build_enqueuer(settings, client)
    # What a sync's write adds, as on the webhook's path: nothing with no one to forward to.
    forwarding = forward and (settings.airflow_url is not None or enqueuer.lineage)
    with FivetranClient.from_settings(settings) as fivetran:
        outcome = reconcile(
            client,
            fivetran,
            settings.key_prefix,
            settings.retention_ms,
            settings.max_clock_skew_ms,
            on_success=enqueuer if forwarding else None,
        )
    for event in outcome.recorded:
        metrics.count_reconciled(event.connector_id)
        log.warning(
            "reconciled a %s sync of %s that the webhook never delivered, ended %s",
            event.status,
            event.connector_id,
            iso(event.created_ms),
        )
    for webhook in outcome.inactive_webhooks:
        log.error("Fivetran reports webhook %s (%s) inactive", webhook["id"], webhook["url"])
    log.info(
        "reconciled %d connections: %d recorded, %d already known, %d sync histories read",
        outcome.connections,
        len(outcome.recorded),
        outcome.known,
        outcome.sync_histories,
    )
    return outcome


def schedule_next(settings: Settings, queue: Queue, now: int | None = None) -> bool:
    """Enqueue the next period's reconcile unless another worker did; return if this did."""
    every = max(1, int(settings.reconcile_minutes * 60_000))
    now = now_ms() if now is None else now
    period = now // every + 1
    key = reconcile_period_key(settings.key_prefix, period)
    if not queue.connection.set(key, now, nx=True, px=2 * every):
        return False
    when = datetime.fromtimestamp(period * every / 1000, tz=timezone.utc)
    queue.enqueue_at(
        when,
        RECONCILE_JOB,
        job_id=reconcile_job_id(settings, period),
        result_ttl=math.ceil(every / 1000),
        failure_ttl=24 * 3600,
    )
    return True


def reconcile_job() -> dict[str, object]:
    """The RQ job: schedule the next period first (a failing run must not stop it), then run."""
    settings = load_settings()
    if not reconcile_enabled(settings):
        return {"skipped": "no Fivetran API key, or FIVETRAN_EVENTS_RECONCILE_MINUTES is 0"}
    schedule_next(settings, forward_queue(settings, settings.redis_client()))
    outcome = reconcile_run(settings)
    return {k: v for k, v in outcome.to_dict().items() if k != "reconciled"}


def start_schedule(settings: Settings, queue: Queue) -> bool:
    """Schedule the next period, or say why not; return whether RQ's scheduler is needed."""
    if not reconcile_enabled(settings):
        log.info(
            "not reconciling against Fivetran: %s",
            "FIVETRAN_EVENTS_RECONCILE_MINUTES is 0"
            if settings.fivetran_api_key and settings.fivetran_api_secret
            else "no FIVETRAN_EVENTS_FIVETRAN_API_KEY and _SECRET",
        )
        return False
    schedule_next(settings, queue)
    return True
