"""Running a migration: plan (scan, count), then each connector replayed and its v1 deleted."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

import redis

from ..history import HistoryWriter, WriteStatus
from ..keys import layout_key, v1_key
from ..keys import migration_done_key as done_key
from ..model import Event
from ..redis_url import as_text
from .replay import V1Rows, v1_events
from .scan import (
    LAYOUT_VERSION,
    V1_SUFFIXES,
    Scan,
    UnknownKeys,
    scan_prefix,
)

#: Times a connector is replayed again when its v1 keys changed during its replay.
MAX_ATTEMPTS = 16


@dataclass
class Progress:
    """Where a run is: what progress lines and the summary report."""

    connectors_total: int
    syncs_total: int
    connectors_done: int = 0
    syncs_done: int = 0
    recorded: int = 0
    duplicates: int = 0
    ignored: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, other: Progress) -> None:
        """Count in what a worker process did for one connector."""
        self.syncs_done += other.syncs_done
        self.recorded += other.recorded
        self.duplicates += other.duplicates
        self.ignored += other.ignored

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def rate(self) -> float:
        return self.syncs_done / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta(self) -> float | None:
        left = self.syncs_total - self.syncs_done
        return left / self.rate if self.rate > 0 else None


@dataclass
class Plan:
    """What a run found before changing anything."""

    scan: Scan
    layout: str | None
    resumed: int
    syncs: dict[str, int]

    @property
    def connectors(self) -> list[str]:
        return sorted(self.scan.v1)


class Migration:
    """Migrate the v1 history under ``prefix`` connector by connector, resumably."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        retention_ms: int,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.writer = HistoryWriter(client, prefix, retention_ms)
        self.on_progress = on_progress

    def plan(self) -> Plan:
        """Scan the prefix; raise UnknownKeys (changing nothing) when it holds strangers."""
        scan = scan_prefix(self.client, self.prefix)
        if scan.unknown_count:
            raise UnknownKeys(self.prefix, scan)
        pipe = self.client.pipeline(transaction=False)
        pipe.get(layout_key(self.prefix))
        pipe.scard(done_key(self.prefix))
        connectors = sorted(scan.v1)
        for c in connectors:
            pipe.zcard(v1_key(self.prefix, c, "ends"))
        layout, resumed, *counts = pipe.execute()
        return Plan(
            scan,
            None if layout is None else as_text(layout),
            int(resumed),
            dict(zip(connectors, (int(n) for n in counts), strict=True)),
        )

    def run(
        self, plan: Plan, jobs: int = 1, connect: Callable[[], redis.Redis] | None = None
    ) -> Progress:
        """Migrate every v1 connector of ``plan``, then mark the layout and clean up.

        With ``jobs`` > 1 and ``connect`` (a Redis client factory), connectors are
        migrated by that many forked processes: a replay spends its time in the writer's
        Python and the round trips, so a second process nearly doubles the rate on two
        cores. Each connector is still replayed by one process, in order.
        """
        progress = Progress(len(plan.connectors), sum(plan.syncs.values()))
        if jobs > 1 and connect is not None and len(plan.connectors) > 1:
            self._run_pool(plan.connectors, progress, jobs, connect)
        else:
            for connector in plan.connectors:
                self.migrate_connector(connector, progress)
                self._done_one(progress)
        if not plan.scan.empty:
            pipe = self.client.pipeline(transaction=True)
            pipe.set(layout_key(self.prefix), LAYOUT_VERSION)
            pipe.delete(done_key(self.prefix))
            pipe.execute()
        return progress

    def _done_one(self, progress: Progress) -> None:
        progress.connectors_done += 1
        if self.on_progress is not None:
            self.on_progress(progress)

    def _run_pool(
        self,
        connectors: list[str],
        progress: Progress,
        jobs: int,
        connect: Callable[[], redis.Redis],
    ) -> None:
        # fork: the workers inherit ``connect`` as it is (a closure needs no pickling).
        pool = ProcessPoolExecutor(
            jobs,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_start_worker,
            initargs=(connect, self.prefix, self.writer.retention_ms),
        )
        try:
            for future in as_completed([pool.submit(_migrate_in_worker, c) for c in connectors]):
                progress.add(future.result())
                self._done_one(progress)
        finally:
            # On an error, stop at once: what was done stays done, a rerun resumes.
            pool.shutdown(wait=True, cancel_futures=True)

    def _read(self, connector: str) -> V1Rows:
        def k(suffix: str) -> str:
            return v1_key(self.prefix, connector, suffix)

        pipe = self.client.pipeline(transaction=False)
        for suffix in ("ends", "ok", "fail", "starts", "running", "resyncs"):
            pipe.zrange(k(suffix), 0, -1, withscores=True)
        return V1Rows(*pipe.execute())

    def migrate_connector(self, connector: str, progress: Progress) -> None:
        """Replay one connector's v1 history, then delete its v1 keys if nobody wrote them.

        The v1 keys are watched before they are read; a change before the delete (a 0.1
        webhook still running) aborts it and the connector is replayed again, which
        records only what is new.
        """
        keys = [v1_key(self.prefix, connector, s) for s in sorted(V1_SUFFIXES)]
        with self.client.pipeline(transaction=True) as pipe:
            for _ in range(MAX_ATTEMPTS):
                pipe.watch(*keys)
                rows = self._read(connector)
                self._replay(v1_events(connector, rows), progress)
                pipe.multi()
                pipe.delete(*keys)
                pipe.sadd(done_key(self.prefix), connector)
                try:
                    pipe.execute()
                except redis.WatchError:
                    continue
                progress.syncs_done += rows.completions
                return
        raise redis.WatchError(f"connector {connector}: its v1 keys keep changing")

    def _replay(self, events: Sequence[Event], progress: Progress) -> None:
        for e in events:
            status = self.writer.record(e).status
            if status is WriteStatus.RECORDED:
                progress.recorded += 1
            elif status is WriteStatus.DUPLICATE:
                progress.duplicates += 1
            else:
                progress.ignored += 1


#: The Migration of a worker process (set by ``_start_worker``, one per process).
_worker: Migration | None = None


def _start_worker(connect: Callable[[], redis.Redis], prefix: str, retention_ms: int) -> None:
    global _worker
    _worker = Migration(connect(), prefix, retention_ms)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """End this worker when the migration that forked it is gone (say, SIGKILLed alone).

    Its pool's pipes stay open in the workers themselves, so an orphan would otherwise
    wait forever; what it was replaying is replayed again by the next run.
    """
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _migrate_in_worker(connector: str) -> Progress:
    """Migrate one connector in a worker process; return what it did."""
    assert _worker is not None, "the pool's initializer did not run"
    done = Progress(1, 0)
    _worker.migrate_connector(connector, done)
    return done
