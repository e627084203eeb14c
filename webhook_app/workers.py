"""The worker processes: the forwarding and reconcile RQ jobs, the worker class, a pool.

``ForwardingWorker`` hands its one Forwarder to each job, so its cached JWT and asset ids
live as long as the worker, with no module-level state. ``WorkerPool`` runs N single
workers as processes (a POST waiting for its timeout holds one delivery, not the queue);
not RQ's ``WorkerPool``: it cannot hand a worker its Forwarder, and it forks. A stop is
passed once, as SIGTERM (RQ's warm shutdown; Ctrl-C twice would be its cold shutdown).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from types import FrameType
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import StopRequested
from rq.job import Job, get_current_job

from fivetran_events import ConfigurationError, Settings, load_settings
from fivetran_events.destinations import DestinationTable, current
from fivetran_events.exceptions import FivetranApiError
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.keys import reconcile_period_key
from fivetran_events.reconcile import Outcome, reconcile
from fivetran_events.timeutil import iso, now_ms
from fivetran_events.uris import UriMap

from . import logs, metrics
from .airflow_client import AirflowClient
from .forwarding.enqueue import Enqueuer, delivery_store, lineage_enabled
from .forwarding.forwarder import Forwarder, Sender
from .forwarding.recorder import Recorder
from .state import State

log = logging.getLogger(__name__)

#: Seconds between the first two looks at a Redis the work loop lost; doubled up to the max.
REDIS_RETRY_S = 1.0
REDIS_RETRY_MAX_S = 30.0


def build_forwarder(settings: Settings, with_airflow: bool = True) -> Forwarder:
    """Build a Forwarder (without Airflow: replay and listings, or lineage alone)."""
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
    """Return what builds the OpenLineage sender, or say its extra is missing."""
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
    job_class = ForwardingJob

    def __init__(self, forwarder: Forwarder, name: str | None = None) -> None:
        super().__init__([forwarder.queue], connection=forwarder.redis, name=name)
        self.forwarder = forwarder
        self.stop_signalled = False

    def handle_warm_shutdown_request(self) -> None:
        self.stop_signalled = True
        super().handle_warm_shutdown_request()  # type: ignore[no-untyped-call]

    def work_until_stopped(self, burst: bool = False, with_scheduler: bool = False) -> bool:
        """Run RQ's work loop until told to stop, and again after it quit on Redis: RQ's
        loop quits on ``redis.TimeoutError`` (a Redis that stopped answering)."""
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
    job = get_current_job()
    if isinstance(job, ForwardingJob) and job.forwarder is not None:
        return job.forwarder
    return build_forwarder(load_settings())


def forward_sync(delivery: str) -> dict[str, Any]:
    """Make one attempt at a delivery; every line it logs names the delivery."""
    connector_id, sync_id, _ = [*delivery.split(":", 2), "", ""][:3]
    with logs.bound(delivery_id=delivery, connector_id=connector_id, sync_id=sync_id):
        return job_forwarder().attempt(delivery).to_dict()


# --- Reconciling -------------------------------------------------------------------

#: RQ's id of the job of one period: the same period never gets two jobs.
RECONCILE_JOB_ID = "fivetran-events-reconcile-{period}"


def reconcile_enabled(settings: Settings) -> bool:
    return bool(
        settings.fivetran_api_key and settings.fivetran_api_secret and settings.reconcile_minutes
    )


def reconcile_run(settings: Settings, forward: bool = True) -> Outcome:
    """Reconcile once, with forwarding (when ``forward``), metrics and log lines."""
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
        reconcile_job,
        job_id=RECONCILE_JOB_ID.format(period=period),
        result_ttl=math.ceil(every / 1000),
        failure_ttl=24 * 3600,
    )
    return True


def reconcile_job() -> dict[str, object]:
    """The RQ job: schedule the next period first (a failing run must not stop it), then run."""
    settings = load_settings()
    if not reconcile_enabled(settings):
        return {"skipped": "no Fivetran API key, or FIVETRAN_EVENTS_RECONCILE_MINUTES is 0"}
    schedule_next(settings, Queue(settings.queue_name, connection=settings.redis_client()))
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


# --- The pool ----------------------------------------------------------------------

#: Seconds before a member that died is started again (a crash loop stays slow).
RESTART_DELAY_S = 1.0
POLL_S = 0.2
#: prctl(2)'s option naming the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def member_setup() -> None:
    """In the member before exec: a process group of its own, SIGTERM when the pool dies."""
    os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def serve_metrics(port: int, directory: str) -> None:
    """Serve the members' metrics, summed, on 127.0.0.1:``port``."""
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    start_http_server(port, addr="127.0.0.1", registry=registry)


@dataclass
class Member:
    slot: int
    proc: subprocess.Popen[bytes]
    starts: int = 1


class WorkerPool:
    """Start ``size`` members from ``argv_of(slot, start)``, keep them running, stop them."""

    def __init__(
        self,
        size: int,
        argv_of: Callable[[int, int], list[str]],
        *,
        env: dict[str, str] | None = None,
        burst: bool = False,
        stop_timeout: float = 60.0,
    ) -> None:
        self.size = size
        self.argv_of = argv_of
        self.env = env
        self.burst = burst
        self.stop_timeout = stop_timeout
        self.members: dict[int, Member] = {}
        self.stopping = False

    def _start(self, slot: int, starts: int) -> Member:
        proc = subprocess.Popen(  # noqa: S603  (our own command line, no shell)
            self.argv_of(slot, starts),
            stdin=subprocess.DEVNULL,
            env=self.env,
            preexec_fn=member_setup,  # the pool starts members from its only thread
        )
        log.info("worker pool: member %d started (pid %d)", slot, proc.pid)
        return Member(slot, proc, starts)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            log.info("worker pool: %s, stopping its members", signal.Signals(signum).name)
            self.stopping = True

    def run(self) -> int:
        """Run until stopped (burst: until every member is done); 1 if a burst member failed."""
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        failed = False
        try:
            self.members = {slot: self._start(slot, 1) for slot in range(self.size)}
            while self.members and not self.stopping:
                time.sleep(POLL_S)
                for slot, m in list(self.members.items()):
                    code = m.proc.poll()
                    if code is None:
                        continue
                    if self.burst:
                        failed |= code != 0
                        del self.members[slot]
                    elif not self.stopping:
                        log.warning(
                            "worker pool: member %d (pid %d) exited with %d; starting it again",
                            slot,
                            m.proc.pid,
                            code,
                        )
                        time.sleep(RESTART_DELAY_S)
                        self.members[slot] = self._start(slot, m.starts + 1)
        finally:
            self.stop()
            for s, handler in previous.items():
                signal.signal(s, handler)
        return 1 if failed else 0

    def stop(self) -> None:
        """SIGTERM every member once, SIGKILL whoever outlives ``stop_timeout``; reap all."""
        live = [m.proc for m in self.members.values() if m.proc.poll() is None]
        for p in live:
            _signal(p, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for p in live:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker pool: member pid %d still busy; killing it", p.pid)
                _signal(p, signal.SIGKILL)
                p.wait()
        self.members = {}


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it just exited by itself
        os.kill(proc.pid, sig)
