"""Reconcile on the server's side: the CLI's run, the worker's RQ job and its schedule.

The run itself is fivetran_events/reconcile.py's; here it gets the webhook's forwarding
hook (a recorded success is forwarded once, as a delivered one is), its metric
(``fivetran_events_reconciled_total{connector}``) and its log lines.

The worker reconciles every ``FIVETRAN_EVENTS_RECONCILE_MINUTES`` through RQ's
scheduler: the next run is a job enqueued at the start of the next period
(``Queue.enqueue_at``, moved to the queue by the scheduler of ``Worker.work(
with_scheduler=True)``), scheduled when a worker starts and again by each run. A period
is scheduled once whatever the number of workers: whoever sets its key first
(keys.reconcile_period_key, SET NX with an expiry) enqueues it, under a job id of its
own.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timezone

from rq import Queue

from fivetran_events import Settings, load_settings
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.keys import reconcile_period_key
from fivetran_events.reconcile import Outcome, reconcile
from fivetran_events.timeutil import iso, now_ms

from . import metrics
from .state import State

log = logging.getLogger(__name__)

#: RQ's id of the job of one period: the same period never gets two jobs.
JOB_ID = "fivetran-events-reconcile-{period}"


def enabled(settings: Settings) -> bool:
    """Whether the worker reconciles: with an API key and secret, and a period."""
    return bool(
        settings.fivetran_api_key and settings.fivetran_api_secret and settings.reconcile_minutes
    )


def run(settings: Settings, forward: bool = True) -> Outcome:
    """One reconcile with ``settings``; recorded successes are forwarded when ``forward``
    and forwarding is on (FIVETRAN_EVENTS_AIRFLOW_URL), as a delivered success is."""
    st = State.from_settings(settings)
    on_success = st.on_success if forward else None
    with FivetranClient.from_settings(settings) as fivetran:
        outcome = reconcile(
            st.redis,
            fivetran,
            settings.key_prefix,
            settings.retention_ms,
            settings.max_clock_skew_ms,
            on_success=on_success,
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
        "reconciled %d connections: %d recorded, %d already known",
        outcome.connections,
        len(outcome.recorded),
        outcome.known,
    )
    return outcome


def period_ms(settings: Settings) -> int:
    return max(1, int(settings.reconcile_minutes * 60_000))


def schedule_next(settings: Settings, queue: Queue, now: int | None = None) -> bool:
    """Enqueue the reconcile of the next period at its start, unless another worker did;
    return whether this call did."""
    every = period_ms(settings)
    now = now_ms() if now is None else now
    period = now // every + 1
    key = reconcile_period_key(settings.key_prefix, period)
    if not queue.connection.set(key, now, nx=True, px=2 * every):
        return False
    when = datetime.fromtimestamp(period * every / 1000, tz=timezone.utc)
    queue.enqueue_at(
        when,
        reconcile_job,
        job_id=JOB_ID.format(period=period),
        result_ttl=math.ceil(every / 1000),
        failure_ttl=24 * 3600,
    )
    return True


def reconcile_job() -> dict[str, object]:
    """The worker's RQ job: schedule the next period first (a failing run does not stop
    the schedule), then run."""
    settings = load_settings()
    if not enabled(settings):
        return {"skipped": "no Fivetran API key, or FIVETRAN_EVENTS_RECONCILE_MINUTES is 0"}
    schedule_next(settings, Queue(settings.queue_name, connection=settings.redis_client()))
    outcome = run(settings)
    return {k: v for k, v in outcome.to_dict().items() if k != "reconciled"}


def start_schedule(settings: Settings, queue: Queue) -> bool:
    """Called as a worker starts: schedule the next period, or say once why not; return
    whether the worker needs RQ's scheduler."""
    if not enabled(settings):
        log.info(
            "not reconciling against Fivetran: %s",
            "FIVETRAN_EVENTS_RECONCILE_MINUTES is 0"
            if settings.fivetran_api_key and settings.fivetran_api_secret
            else "no FIVETRAN_EVENTS_FIVETRAN_API_KEY and _SECRET",
        )
        return False
    schedule_next(settings, queue)
    return True
