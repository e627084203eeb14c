"""The sweeper: queue an attempt for every delivery whose due time has come.

Retries, lease expiries and deliveries whose first job was never queued (a crash between
the webhook's script and its enqueue) are due times in one sorted set; the worker's
sweeper thread queues whatever is due (never a second job while one is queued), so no
RQ scheduler is needed and a killed worker's delivery resumes.
"""

from __future__ import annotations

from fivetran_events.keys import due_key

from ._lua import CLAIM
from .enqueue import Enqueuer
from .record import forward_job_id, text

#: Deliveries the sweeper queues per pass.
SWEEP_BATCH = 500


def sweep(enq: Enqueuer, now: int, limit: int = SWEEP_BATCH) -> int:
    """Queue an attempt for every delivery due at ``now``; return how many were queued."""
    client = enq.store.client
    due = due_key(enq.settings.key_prefix)
    claim = client.register_script(CLAIM)
    ids = [text(m) for m in client.zrangebyscore(due, "-inf", now, start=0, num=limit)]
    queued = 0
    for did in ids:
        job = forward_job_id(did, now)
        if claim(
            keys=[due, enq.store.key(did)],
            args=[did, now, now + enq.lease_ms, enq.job_prefix, job],
        ):
            enq.enqueue_job(did, None, job)
            queued += 1
    return queued
