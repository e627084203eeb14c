"""A pool of worker processes under one supervisor.

``WorkerPool`` runs N single workers as processes (a POST waiting for its timeout holds one
delivery, not the queue); not RQ's ``WorkerPool``, which cannot hand a worker its Forwarder,
and forks. A stop is passed once, as SIGTERM (RQ's warm shutdown; a second is its cold one).
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
POLL_S = 0.2
#: prctl(2)'s option naming the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def member_setup() -> None:
    """In the member before exec: a process group of its own, SIGTERM when the pool dies."""
    os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def serve_metrics(host: str, port: int, directory: str | None = None) -> None:
    """Serve this process's metrics on ``host``:``port``, or (given the pool's
    ``directory``) its members', summed."""
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    if directory is None:
        start_http_server(port, addr=host)
        return
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    start_http_server(port, addr=host, registry=registry)


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
