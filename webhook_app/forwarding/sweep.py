"""The sweeper: queue an attempt for every delivery whose due time has come.

Retries and lease expiries are due times in one sorted set; the worker's sweeper thread
queues whatever is due (never a second job while one is queued), so no RQ scheduler is
needed and a killed worker's delivery resumes.
"""

from __future__ import annotations

from fivetran_events.keys import due_key

from ._lua import CLAIM
from .parts import WorkerParts
from .record import forward_job_id, text

#: Deliveries the sweeper queues per pass.
SWEEP_BATCH = 500


def sweep(fw: WorkerParts, now: int | None = None, limit: int = SWEEP_BATCH) -> int:
    """Queue an attempt for every delivery that is due; return how many were queued."""
    now = fw.clock() if now is None else now
    due = due_key(fw.settings.key_prefix)
    claim = fw.redis.register_script(CLAIM)
    ids = [text(m) for m in fw.redis.zrangebyscore(due, "-inf", now, start=0, num=limit)]
    queued = 0
    for did in ids:
        job = forward_job_id(did, now)
        if claim(
            keys=[due, fw.store.key(did)],
            args=[did, now, now + fw.lease_ms, fw.job_prefix, job],
        ):
            fw.enqueue_job(did, None, job)
            queued += 1
    return queued
