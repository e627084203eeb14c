"""RQ jobs run by ``fivetran-events worker``; they must be importable by the workers.

The worker (``ForwardingWorker``, an RQ SimpleWorker) holds one Forwarder (Redis, queue,
Airflow client with its cached JWT and asset ids) and hands it to each job it runs:
jobs run in the worker's process, so that cache lives as long as the worker, and no
module-level state decides which Forwarder a job uses (two workers in one process, as in
the tests, each use their own). A job run by any other RQ worker builds its Forwarder
from the ``FIVETRAN_EVENTS_*`` environment.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import StopRequested
from rq.job import Job, get_current_job

from fivetran_events import ConfigurationError, Settings, load_settings
from fivetran_events.destinations import DestinationTable, current
from fivetran_events.exceptions import FivetranApiError
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.uris import UriMap

from . import logs
from .airflow_client import AirflowClient
from .forwarding.enqueue import Enqueuer, delivery_store
from .forwarding.forwarder import Forwarder, Sender
from .forwarding.recorder import Recorder
from .lineage import lineage_enabled

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)

#: Seconds between the first two looks at a Redis the work loop lost; doubled up to the max.
REDIS_RETRY_S = 1.0
REDIS_RETRY_MAX_S = 30.0


def build_forwarder(settings: Settings, with_airflow: bool = True) -> Forwarder:
    """Build a Forwarder from ``settings`` (without Airflow: replay and listings only).

    With OpenLineage on (``lineage.lineage_enabled``) a worker also sends lineage, and
    needs no Airflow URL for it: then it forwards nothing to Airflow.
    """
    client = settings.redis_client()
    store = delivery_store(settings, client)
    lineage = lineage_enabled(settings)
    fivetran = (
        FivetranClient.from_settings(settings)
        if settings.fivetran_api_key and settings.fivetran_api_secret
        else None
    )
    sender = None
    if with_airflow and lineage:
        sender = lineage_sender(settings, client, fivetran)
    airflow = None
    if with_airflow and (settings.airflow_url or not lineage):
        airflow = AirflowClient.from_settings(settings)
    return Forwarder(
        settings,
        store,
        Enqueuer(settings, store, UriMap.from_settings(settings), lineage=lineage),
        Queue(settings.queue_name, connection=client),
        airflow,
        lineage=sender,
        fivetran=fivetran,
    )


def lineage_sender(
    settings: Settings, client: redis.Redis, fivetran: FivetranClient | None
) -> Callable[[Recorder], Sender]:
    """Return what builds the OpenLineage sender; a clear error when the ``lineage``
    extra is missing.

    A run's outputs are the connector's destination tables (``destinations.current``:
    cached, refreshed when due if a Fivetran key is set); none while they are unknown
    or Fivetran cannot be read."""
    try:
        from .forwarding.lineage import LineageSender, table_outputs
    except ImportError as exc:
        raise ConfigurationError(
            f"OpenLineage is on but its client is not installed ({exc}): "
            "pip install 'fivetran-events[lineage]', or set FIVETRAN_EVENTS_LINEAGE=off"
        ) from None

    def tables(connector_id: str) -> list[DestinationTable] | None:
        try:
            return current(client, settings, fivetran, connector_id)
        except FivetranApiError as exc:
            log.warning(
                "connector %s: its run has no outputs, Fivetran failed: %s", connector_id, exc
            )
            return None

    def sender(recorder: Recorder) -> Sender:
        return LineageSender.from_settings(recorder, settings, outputs=table_outputs(tables))

    return sender


class ForwardingJob(Job):
    """An RQ job that carries, in memory only, the Forwarder of the worker running it."""

    #: Set by ``ForwardingWorker`` before the job runs; never saved to Redis.
    forwarder: Forwarder | None = None


class ForwardingWorker(SimpleWorker):
    """A SimpleWorker that runs every job with its own Forwarder.

    SimpleWorker runs jobs in this process: the JWT and asset ids stay cached, and a kill
    of this process is a kill mid-delivery (the lease and sweeper recover it).
    """

    job_class = ForwardingJob

    def __init__(self, forwarder: Forwarder, name: str | None = None) -> None:
        super().__init__([forwarder.queue], connection=forwarder.redis, name=name)
        self.forwarder = forwarder
        #: Set on SIGTERM/SIGINT (RQ's warm shutdown): the work loop ends for good.
        self.stop_signalled = False

    def handle_warm_shutdown_request(self) -> None:
        self.stop_signalled = True
        super().handle_warm_shutdown_request()  # type: ignore[no-untyped-call]

    def work_until_stopped(self, burst: bool = False, with_scheduler: bool = False) -> bool:
        """Run RQ's work loop until told to stop, and again after it quit on Redis.

        RQ's loop retries a refused connection but quits on ``redis.TimeoutError`` (a
        Redis that stopped answering, a reconnect that timed out). A pool starts a member
        that quit again (worker_pool.py); so does this, in process, for a lone worker:
        once Redis answers it registers again and goes on. A burst worker's loop ends
        as RQ's does (its caller runs it again).
        """
        worked = False
        while True:
            try:
                worked = self.work(burst=burst, with_scheduler=with_scheduler) or worked
            except redis.RedisError:  # its teardown could not reach Redis either
                log.warning("worker %s: left Redis without deregistering", self.name)
            if burst or self.stop_signalled:
                return worked
            log.warning("worker %s: its work loop ended; starting it again", self.name)
            try:
                self._wait_for_redis()
            except StopRequested:  # RQ's handler, on a signal while no job runs
                return worked
            if self.stop_signalled:
                return worked

    def _wait_for_redis(self) -> None:
        """Return once Redis answers (or a stop was signalled), this worker deregistered."""
        delay = REDIS_RETRY_S
        while not self.stop_signalled:
            time.sleep(delay)
            try:
                # Else RQ refuses this name as an active worker's when it registers again.
                self.register_death()  # type: ignore[no-untyped-call]
                return
            except redis.RedisError as exc:
                log.warning("worker %s: Redis still unavailable: %s", self.name, exc)
                delay = min(delay * 2, REDIS_RETRY_MAX_S)

    def execute_job(self, job: Job, queue: Queue) -> None:
        if isinstance(job, ForwardingJob):
            job.forwarder = self.forwarder
        super().execute_job(job, queue)


def job_forwarder() -> Forwarder:
    """The running worker's Forwarder, or one built from the environment."""
    job = get_current_job()
    if isinstance(job, ForwardingJob) and job.forwarder is not None:
        return job.forwarder
    return build_forwarder(load_settings())


def forward_sync(delivery: str) -> dict[str, Any]:
    """Make one attempt at forwarding a successful sync to one Airflow dataset.

    Its ids are bound for the attempt, so every line it logs names the delivery.
    """
    connector_id, sync_id, _ = [*delivery.split(":", 2), "", ""][:3]
    with logs.bound(delivery_id=delivery, connector_id=connector_id, sync_id=sync_id):
        return job_forwarder().attempt(delivery).to_dict()
