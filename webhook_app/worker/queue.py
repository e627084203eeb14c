"""The deployment's RQ queue, and the only jobs a worker runs from it.

RQ's defaults would run code from Redis (its pickle serializer loads any object, its worker
calls whatever a job names and its callbacks): anyone able to write to our Redis could run code
beside Airflow's password. So jobs are JSON (data only), on the queue and in the worker, and
``DataJob`` runs only ``JOBS``: anything else, or not JSON, is refused (``refusal``).
"""

from __future__ import annotations

from typing import Any

import redis
from rq import Queue
from rq.exceptions import DeserializationError
from rq.job import Job
from rq.serializers import JSONSerializer

from fivetran_events import Settings

from ..exceptions import RefusedJob
from ..forwarding.sweeper import FORWARD_JOB

#: How jobs are written and read, by the sweeper, the schedule and the worker: data only.
SERIALIZER = JSONSerializer
#: The reconcile run's dotted path (``schedule.reconcile_job``).
RECONCILE_JOB = "webhook_app.worker.schedule.reconcile_job"
#: Every job a worker may run: a forwarding attempt and a reconcile run.
JOBS = frozenset({FORWARD_JOB, RECONCILE_JOB})


def refusal(job: Job) -> str | None:
    """Say why ``job`` must not run, or None: it must be JSON naming one of ``JOBS`` as a
    plain function, with no callback or webhook (RQ would call or send those too)."""
    try:
        name, instance, args, kwargs = job.func_name, job.instance, job.args, job.kwargs
    except DeserializationError:
        return "its data is not JSON (a pickled job?)"
    if name not in JOBS:
        return f"it names {name!r}, not one of {sorted(JOBS)}"
    if instance is not None or not isinstance(args, list) or not isinstance(kwargs, dict):
        return "its call is not a plain function's (arguments, keyword arguments)"
    callbacks = (job._success_callback_name, job._failure_callback_name)
    if any(callbacks) or job._stopped_callback_name or job.webhooks:
        return "it carries a callback or a webhook"
    return None


class DataJob(Job):
    """A job that runs only if ``refusal`` finds nothing, and never a callback or webhook:
    also where RQ runs them outside a worker's attempt (a registry's cleanup)."""

    @property
    def func(self) -> Any:
        reason = refusal(self)
        if reason is not None:
            raise RefusedJob(f"job {self.id}: {reason}")
        return super().func

    @property
    def success_callback(self) -> None:
        return None

    @property
    def failure_callback(self) -> None:
        return None

    @property
    def stopped_callback(self) -> None:
        return None

    def send_webhooks(self, status: Any, *, exc_string: str | None = None) -> None:
        """Send nothing: none of our jobs has a webhook, and a planted one must not reach out."""


def forward_queue(settings: Settings, client: redis.Redis) -> Queue:
    """The deployment's queue (named for its key prefix), its jobs JSON."""
    return Queue(settings.queue_name, connection=client, serializer=SERIALIZER, job_class=DataJob)
