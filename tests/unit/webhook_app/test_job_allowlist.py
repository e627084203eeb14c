"""The worker's job allowlist names real functions (that a worker runs nothing else:
tests/integration/webhook_app/test_job_allowlist.py)."""

from __future__ import annotations

from webhook_app.forwarding.sweeper import FORWARD_JOB
from webhook_app.worker.queue import JOBS, RECONCILE_JOB


def test_the_allowed_jobs_are_the_functions_a_worker_runs() -> None:
    """The allowlist names real functions: the forwarding attempt and the reconcile job."""
    from rq.utils import import_attribute

    from webhook_app.worker import rq_worker, schedule

    assert {FORWARD_JOB, RECONCILE_JOB} == JOBS
    assert import_attribute(FORWARD_JOB) is rq_worker.forward_sync
    assert import_attribute(RECONCILE_JOB) is schedule.reconcile_job
