"""Run several forwarding workers under one command: one slow answer holds up one delivery.

A ``ForwardingWorker`` attempts one delivery at a time; a POST that waits for its timeout
(Airflow's SQLite busy, a slow proxy) would hold every delivery queued behind it. The pool
runs N of them, each a ``fivetran-events worker --concurrency 1`` process of its own (its
Forwarder, its cached JWT, its sweeper), and restarts one that dies. Each takes the next
job from the queue, so deliveries of different syncs proceed independently; a delivery's
lease keeps two members off the same one.

Why not RQ's ``WorkerPool``: it builds each worker as ``worker_class(queues, name=...,
connection=...)``, so it cannot hand a worker its Forwarder, and it forks the pool's
process (threads and all) rather than starting a fresh one.

Stopping: SIGTERM or SIGINT to the pool is passed once, as SIGTERM, to every member (RQ's
warm shutdown: each finishes the attempt in hand); members still running after
``stop_timeout`` get SIGKILL (the lease and the in-flight mark cover that). Members run in
process groups of their own, so a terminal's Ctrl-C reaches them only through the pool
(twice would be RQ's cold shutdown), and each gets SIGTERM from the kernel should the pool
itself die (Linux ``PR_SET_PDEATHSIG``), so a killed pool leaves no orphans.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

log = logging.getLogger(__name__)

#: Seconds before a member that died is started again (a crash loop stays slow).
RESTART_DELAY_S = 1.0
#: Seconds between two looks at the members.
POLL_S = 0.2
#: prctl(2)'s option naming the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def member_setup() -> None:
    """In the member before exec: a process group of its own, SIGTERM when the pool dies."""
    os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def serve_metrics(port: int, directory: str) -> None:
    """Serve the members' metrics, summed, on 127.0.0.1:``port`` (one target per pool).

    Each member writes its samples to ``directory`` (``PROMETHEUS_MULTIPROC_DIR``), as
    gunicorn's workers do for the app's /metrics.
    """
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    start_http_server(port, addr="127.0.0.1", registry=registry)


@dataclass
class Member:
    """One worker process of the pool, and how many times its slot was started."""

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
        """Run until stopped (or, in burst mode, until every member is done).

        Returns 0, or 1 when a member of a burst failed.
        """
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
