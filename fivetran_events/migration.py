"""Migrate a history from key layout v1 (``{p}c:{c}:*``) to the current one, online.

The migration knows v1 and nothing of the current layout: it replays each connector's v1
history as events through ``HistoryWriter.record`` (no forwarding hook, so nothing goes
to Airflow again). ``record`` is idempotent on content and its result does not depend on
arrival order, so the webhook may record new events of the same connector meanwhile,
and a run that was killed is simply run again: a connector's v1 keys are deleted only
after all its events are recorded, in a transaction that watches them (a 0.1 webhook
still writing v1 during a rolling upgrade makes that connector replay again, it never
loses an event).

Before it changes anything it scans the prefix and refuses (``UnknownKeys``) when a key
is neither v1 history, nor the current layout's (``{p}h:*``), nor a key both layouts
share: a wrong prefix or another application's keys must not be taken for history.

Three steps: classify the prefix's keys (``scan_prefix``), turn a v1 connector's rows
back into the events that wrote them (``v1_events``, pure), and replay them connector
by connector (``Migration``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

import redis

from .exceptions import ConfigurationError
from .history import HistoryWriter, WriteStatus
from .keys import layout_key, v1_key
from .keys import migration_done_key as done_key
from .model import Event, EventKind, is_valid_id
from .redis_url import as_text
from .timeutil import from_ms

# --- what the prefix holds -------------------------------------------------------------

#: The layout this release writes; ``{p}layout`` holds it once a migration has ended.
LAYOUT_VERSION = "2"

#: v1's per-connector sets (``guard`` is never stored, but a crash could leave one).
V1_SUFFIXES = frozenset(
    ("ok", "okstart", "fail", "ends", "ended", "starts", "running", "resyncs", "seen", "guard")
)
#: Keys both layouts share, by name after the prefix.
SHARED_KEYS = frozenset(("connectors", "last_test_event", "readyz", "layout", "reconcile"))
#: The current layout's namespace after the prefix: every per-connector key is under it.
CURRENT_NAMESPACE = "h:"
#: Shared namespaces: forwarding records (not migrated, only recognised), the
#: migration's own progress and reconcile's schedule (keys.reconcile_period_key).
SHARED_NAMESPACES = ("fwd:", "migrate:", "reconcile:", "tables:")
#: RQ's own keys; they fall under the prefix only when the prefix is empty or ``r``.
RQ_NAMESPACE = "rq:"
#: How many unknown keys a refusal names.
UNKNOWN_SHOWN = 10


class KeyKind(str, Enum):
    V1 = "v1"
    CURRENT = "current"
    SHARED = "shared"
    FOREIGN = "foreign"
    UNKNOWN = "unknown"


def classify(prefix: str, key: str) -> tuple[KeyKind, str | None]:
    """Say what ``key`` is to the migration, and its connector when it is v1 history.

    FOREIGN is outside the prefix (or RQ's own keys under an empty prefix): not ours to
    judge. UNKNOWN is under the prefix and matches no layout: the migration refuses.
    """
    if prefix and not key.startswith(prefix):
        return KeyKind.FOREIGN, None
    rest = key[len(prefix) :]
    if key.startswith(RQ_NAMESPACE) and not prefix.startswith(RQ_NAMESPACE):
        return KeyKind.FOREIGN, None
    if rest in SHARED_KEYS or rest.startswith(SHARED_NAMESPACES):
        return KeyKind.SHARED, None
    if rest.startswith(CURRENT_NAMESPACE):
        return KeyKind.CURRENT, None
    if rest.startswith("c:"):
        connector, _, suffix = rest[2:].rpartition(":")
        if suffix in V1_SUFFIXES and is_valid_id(connector):
            return KeyKind.V1, connector
    return KeyKind.UNKNOWN, None


@dataclass
class Scan:
    """What the prefix holds, by kind; ``unknown`` names the first few unknown keys."""

    v1: dict[str, set[str]] = field(default_factory=dict)
    current: int = 0
    shared: int = 0
    unknown: list[str] = field(default_factory=list)
    unknown_count: int = 0

    def add(self, prefix: str, key: str) -> None:
        kind, connector = classify(prefix, key)
        if kind is KeyKind.V1:
            assert connector is not None
            self.v1.setdefault(connector, set()).add(key)
        elif kind is KeyKind.CURRENT:
            self.current += 1
        elif kind is KeyKind.SHARED:
            self.shared += 1
        elif kind is KeyKind.UNKNOWN:
            self.unknown_count += 1
            if len(self.unknown) < UNKNOWN_SHOWN:
                self.unknown.append(key)

    @property
    def empty(self) -> bool:
        return not (self.v1 or self.current or self.shared or self.unknown_count)


class UnknownKeys(ConfigurationError):
    """Raised before anything changes when the prefix holds keys of no known layout."""

    def __init__(self, prefix: str, scan: Scan) -> None:
        shown = ", ".join(scan.unknown)
        more = scan.unknown_count - len(scan.unknown)
        super().__init__(
            f"refusing to migrate: {scan.unknown_count} key(s) under prefix {prefix!r} "
            f"belong to no known layout ({shown}{f', and {more} more' if more else ''}); "
            "check FIVETRAN_EVENTS_KEY_PREFIX, or move those keys away; nothing was changed"
        )
        self.scan = scan


class UnreadableV1(ConfigurationError):
    """Raised before a connector's replay when one of its v1 members cannot be read.

    Nothing of that connector has been written then; connectors migrated before it
    stay migrated, and a run after the member is fixed or removed goes on from there.
    """

    def __init__(self, connector: str, member: str, why: str) -> None:
        super().__init__(
            f"refusing to migrate connector {connector!r}: a member of its v1 history cannot "
            f"be read ({why}): {member[:200]!r}; fix or remove it in its keys c:{connector}:*, "
            "then run again (its history was not changed)"
        )
        self.parts = (connector, member, why)

    def __reduce__(self) -> tuple[type[UnreadableV1], tuple[str, str, str]]:
        # Raised in a --jobs worker process, it crosses back to the parent by pickle.
        return (type(self), self.parts)


def _glob_escape(text: str) -> str:
    return "".join(f"\\{ch}" if ch in "*?[]\\" else ch for ch in text)


def scan_prefix(client: redis.Redis, prefix: str) -> Scan:
    """Classify every key under ``prefix`` (SCAN: never blocks Redis like KEYS would)."""
    scan = Scan()
    for raw in client.scan_iter(match=f"{_glob_escape(prefix)}*", count=1000):
        scan.add(prefix, as_text(raw))
    return scan


# --- v1 rows back into events (pure) -----------------------------------------------------

Rows = Sequence[tuple[Any, float]]
T = TypeVar("T")


@dataclass(frozen=True)
class V1Rows:
    """One connector's v1 sets, as (member, score) rows."""

    ends: Rows = ()
    ok: Rows = ()
    fail: Rows = ()
    starts: Rows = ()
    running: Rows = ()
    resyncs: Rows = ()

    @property
    def completions(self) -> int:
        return len({as_text(m) for m, _ in (*self.ends, *self.ok, *self.fail)})


def _event(kind: EventKind, name: str, connector: str, ms: int, **more: Any) -> Event:
    return Event(kind=kind, event=name, created=from_ms(ms), connector_id=connector, **more)


def v1_events(connector: str, rows: V1Rows) -> list[Event]:
    """Turn one connector's v1 rows back into the events that wrote them, newest first.

    Each completion becomes its ``sync_end`` (status, reason, task type, at its end) led
    by the ``sync_start`` of its attempt when the member knows it (``b``); the ``starts``
    and ``running`` sets give the starts of syncs without a recorded end; ``resyncs``
    members give the resync events. The events carry the content the webhook saw, so
    their dedup ids are the original deliveries': a redelivery during or after the
    migration stays a duplicate. Newest first, each start just before its end, so a
    connector half replayed holds its newest syncs whole: a sensor waiting on a target
    after them reads the right answer or waits. Raises UnreadableV1 for a member that
    is not 0.1's JSON, before anything of the connector is written.
    """
    units: list[tuple[int, list[Event]]] = []
    for member in {as_text(m) for m, _ in (*rows.ends, *rows.ok, *rows.fail)}:
        units.append(_parsed(connector, member, lambda b: _completion(connector, b)))
    for sid, score in (*rows.running, *rows.starts):
        start = _event(
            EventKind.SYNC_START, "sync_start", connector, int(score), sync_id=as_text(sid)
        )
        units.append((int(score), [start]))
    for member, _score in rows.resyncs:
        units.append(_parsed(connector, as_text(member), lambda b: _resync(connector, b)))
    units.sort(key=lambda u: (u[0], [e.dedup_id for e in u[1]]), reverse=True)
    seen: set[str] = set()
    out: list[Event] = []
    for _t, unit in units:
        for e in unit:
            if e.dedup_id not in seen:
                seen.add(e.dedup_id)
                out.append(e)
    return out


def _parsed(connector: str, member: str, build: Callable[[Any], T]) -> T:
    """Build from a member's JSON; a member that is not 0.1's is UnreadableV1, named."""
    try:
        return build(json.loads(member))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UnreadableV1(connector, member, f"{type(exc).__name__}: {exc}") from None


def _completion(connector: str, body: dict[str, Any]) -> tuple[int, list[Event]]:
    """A completion's sync_end, led by its attempt's sync_start when the member has one."""
    sid, end = str(body["s"]), int(body["t"])
    unit = []
    if body.get("b") is not None:
        unit.append(
            _event(EventKind.SYNC_START, "sync_start", connector, int(body["b"]), sync_id=sid)
        )
    unit.append(
        _event(
            EventKind.SYNC_END,
            "sync_end",
            connector,
            end,
            sync_id=sid,
            status=str(body["st"]),
            reason=body.get("r"),
            task_type=body.get("tt"),
        )
    )
    return end, unit


def _resync(connector: str, body: dict[str, Any]) -> tuple[int, list[Event]]:
    tables = tuple(str(t) for t in body.get("tables", ()))
    t = int(body["t"])
    return t, [_event(EventKind.RESYNC, str(body["e"]), connector, t, tables=tables)]


# --- the run ----------------------------------------------------------------------------

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
