"""The web side of forwarding: create a sync's deliveries, due now, each with its kind.

The deliveries are a chunk of the history's one write script, so the webhook does no RQ
work and a crash after its script loses nothing: a worker's sweeper queues their jobs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import redis
from redis.client import Pipeline
from redis.typing import EncodableT

from fivetran_events import Event, Settings
from fivetran_events.deliveries import DeliveryKind, DeliveryState, Field, SyncRef
from fivetran_events.history.writer import TRIM_EVERY, trims
from fivetran_events.keys import (
    deliveries_key,
    delivery_id,
    due_key,
    sweep_wake_key,
    sync_deliveries_key,
)
from fivetran_events.model import (
    FAILURE_STATUSES,
    SOURCE_IMPORTED,
    SOURCE_RECONCILED,
    SOURCE_WEBHOOK,
    SUCCESS_STATUSES,
    EventKind,
)
from fivetran_events.timeutil import now_ms
from fivetran_events.uris import UriMap

from .store import DeliveryStore

#: The scheme of a sync's table-level delivery's URI (``tables_uri``).
TABLES_SCHEME = "fivetran-tables://connector/"
#: The scheme of a sync's partitions delivery's URI (``partitions_uri``).
PARTITIONS_SCHEME = "fivetran-partitions://connector/"
#: A lineage delivery's target starts with this (a dataset URI never does: no "//").
LINEAGE_PREFIX = "openlineage:"
#: Statuses that stop a sync for good without success or failure.
ABORT_STATUSES = frozenset({"CANCELED", "CANCELLED"})
#: The variables ``OpenLineageClient()`` finds its transport by; any turns ``auto`` on.
CLIENT_VARIABLES = ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG")
#: Dynamic transport configuration (``OPENLINEAGE__TRANSPORT__TYPE=http`` ...).
CLIENT_PREFIX = "OPENLINEAGE__TRANSPORT"


# Create each delivery of a sync unless it exists (a second success under one sync id
# must not reset a delivered record), index it, make it due now and wake the sweepers.
# An existing delivery keeps its due time; a final one is made due, and its attempt
# renews its final expiry. The wake list holds at most one element. The listing and the
# state indexes drop entries older than the retention on one sync in TRIM_EVERY.
# KEYS: the sync's set, listing, due set, the state indexes (deliveries.INDEXED order,
# pending first), the wake list; then per delivery: its record.
# ARGV: ttl s, received ms, listing cutoff ms ('' trims nothing), connector id, sync id,
# name, type, group, status, ended ms; then per delivery: id, uri, kind
# (deliveries.DeliveryKind: which sender attempts it).
_CREATE = """
local K, A = k0, a0
local ttl, received = ARGV[A + 1], ARGV[A + 2]
local k, a = K + 8, A + 10
if k < #KEYS and ARGV[A + 3] ~= '' then
  for i = 2, 7 do
    if i ~= 3 then redis.call('ZREMRANGEBYSCORE', KEYS[K + i], '-inf', '(' .. ARGV[A + 3]) end
  end
end
while k < #KEYS do
  local rec, id = KEYS[k + 1], ARGV[a + 1]
  if redis.call('EXISTS', rec) == 0 then
    redis.call('HSET', rec, 'connector_id', ARGV[A + 4], 'sync_id', ARGV[A + 5],
      'uri', ARGV[a + 2], 'kind', ARGV[a + 3], 'connector_name', ARGV[A + 6],
      'connector_type', ARGV[A + 7], 'group_id', ARGV[A + 8], 'status', ARGV[A + 9],
      'ended_ms', ARGV[A + 10],
      'received_ms', received, 'window_ms', received, 'updated_ms', received,
      'state', '{pending}', 'attempts', '0')
    redis.call('ZADD', KEYS[K + 4], received, id)
  end
  redis.call('EXPIRE', rec, ttl)
  redis.call('SADD', KEYS[K + 1], id)
  redis.call('ZADD', KEYS[K + 2], 'NX', received, id)
  redis.call('ZADD', KEYS[K + 3], 'NX', received, id)
  k, a = k + 1, a + 3
end
if k > K + 8 then
  redis.call('EXPIRE', KEYS[K + 1], ttl)
  if redis.call('LLEN', KEYS[K + 8]) == 0 then redis.call('RPUSH', KEYS[K + 8], 1) end
end
"""
CREATE_CHUNK = _CREATE.replace("{pending}", DeliveryState.PENDING.value)
#: CREATE_CHUNK as a script of its own: its keys and arguments start at 1.
CREATE = "local k0, a0 = 0, 0\n" + CREATE_CHUNK + "return 1\n"


def lease_ms(settings: Settings) -> int:
    """Return how long one attempt may hold a delivery: longer than its longest attempt
    (four requests, each up to a connect and a read timeout, a 401 doubling one)."""
    return int(max(settings.forward_lease_seconds, 12 * settings.airflow_timeout_seconds) * 1000)


def keep_delivered_ms(settings: Settings) -> int:
    """Return how long a delivered record stays after Airflow took its event."""
    return int(settings.forward_keep_delivered_hours * 3_600_000)


def record_ttl_ms(settings: Settings) -> int:
    """Return how long a record not delivered lives after its retry window opened: the
    window, the last attempt's lease and unknown-outcome margin, then the keep time."""
    window = settings.forward_retry_hours * 3_600_000
    last = lease_ms(settings) + settings.forward_unknown_outcome_seconds * 1000
    return int(window + last) + keep_delivered_ms(settings)


def delivery_store(settings: Settings, client: redis.Redis) -> DeliveryStore:
    return DeliveryStore(client, settings.key_prefix, record_ttl_ms(settings) // 1000)


def build_enqueuer(settings: Settings, client: redis.Redis) -> Enqueuer:
    """Build the enqueuer of a process, the web app's and the worker's alike."""
    return Enqueuer(
        settings,
        delivery_store(settings, client),
        UriMap.from_settings(settings),
        lineage=lineage_enabled(settings),
    )


class Enqueuer:
    """Create deliveries, due now, and wake the sweepers."""

    #: The chunk of the history's record script (``OnSuccess.lua``).
    lua = CREATE_CHUNK

    def __init__(
        self,
        settings: Settings,
        store: DeliveryStore,
        uri_map: UriMap,
        *,
        clock: Callable[[], int] = now_ms,
        trim_every: int = TRIM_EVERY,
        airflow: bool | None = None,
        lineage: bool = False,
    ) -> None:
        """``airflow``: a delivery per dataset URI of a success; ``lineage``: per start and end."""
        self.settings = settings
        self.airflow = settings.airflow_url is not None if airflow is None else airflow
        self.lineage = lineage
        #: Read by the history writer (``OnSuccess``): called for starts and failures too.
        self.every_sync = lineage
        self.store = store
        self.uri_map = uri_map
        self.clock = clock
        self.lease_ms = lease_ms(settings)
        self.trim_every = trim_every
        self.create_script = store.client.register_script(CREATE)
        self.shared_keys = [
            deliveries_key(settings.key_prefix),
            due_key(settings.key_prefix),
            *self.store.state_keys,
            sweep_wake_key(settings.key_prefix),
        ]

    def __call__(self, event: Event) -> tuple[list[str], list[EncodableT]]:
        """Return the keys and arguments that create ``event``'s deliveries in its script."""
        targets = self.targets(event) if self.airflow and event.is_success else []
        if targets and self._partitioned(event):
            targets.append((partitions_uri(event.connector_id), DeliveryKind.PARTITIONS))
        if self.lineage:
            targets += [(t, DeliveryKind.LINEAGE) for t in lineage_targets(event)]
        if not targets:
            return [], []
        return self._parts(_sync_of(event), trims(event, self.trim_every), self.clock(), targets)

    def _partitioned(self, event: Event) -> bool:
        """Whether a success gets a delivery for its connector's partitions (the worker
        expands it: partitions.py). A table's come with its expansion (tables.py); an
        import posts none (``replay --partitions`` does, when asked)."""
        s = self.settings
        return bool(
            s.partition_grain and s.asset_granularity != "table" and event.source != SOURCE_IMPORTED
        )

    def create(self, event: Event, target: tuple[str, DeliveryKind], now: int) -> str:
        """Create one delivery of a past success (``replay --since``), kept if it exists."""
        return self.create_many(_sync_of(event), [target], now)[0]

    def create_many(
        self,
        sync: SyncRef,
        targets: list[tuple[str, DeliveryKind]],
        now: int,
        pipe: Pipeline | None = None,
        partition_key: str | None = None,
    ) -> list[str]:
        """Create ``sync``'s deliveries (each kept if it exists), in ``pipe`` if given;
        with ``partition_key`` (then in ``pipe``), its partitioned events."""
        keys, args = self._parts(sync, False, now, targets, partition_key)
        self.create_script(keys=keys, args=args, client=pipe)
        ids = [target_id(sync, u, partition_key) for u, _ in targets]
        if partition_key is not None:
            assert pipe is not None  # the key must be in the record's own transaction
            for did in ids:
                pipe.hsetnx(self.store.key(did), Field.PARTITION_KEY, partition_key)
        return ids

    def targets(self, event: Event) -> list[tuple[str, DeliveryKind]]:
        granularity = self.settings.asset_granularity
        out: list[tuple[str, DeliveryKind]] = []
        if granularity != "table":
            uris = self.uri_map.uris(
                event.connector_id, event.connector_name, event.connector_type, event.group_id
            )
            out += [(u, DeliveryKind.ASSET) for u in uris]
        if granularity != "connector":
            # One delivery for all the tables: the worker expands it (tables.py).
            out.append((tables_uri(event.connector_id), DeliveryKind.TABLES))
        return out

    def _parts(
        self,
        sync: SyncRef,
        trim: bool,
        now: int,
        targets: list[tuple[str, DeliveryKind]],
        partition_key: str | None = None,
    ) -> tuple[list[str], list[EncodableT]]:
        keys = [
            sync_deliveries_key(self.settings.key_prefix, sync.connector_id, sync.sync_id),
            *self.shared_keys,
        ]
        args: list[EncodableT] = [
            self.store.retention_s,
            now,
            # The listing keeps as long as the records; trimmed as often as the history.
            now - self.store.retention_s * 1000 if trim else "",
            sync.connector_id,
            sync.sync_id,
            sync.connector_name or "",
            sync.connector_type or "",
            sync.group_id or "",
            sync.status or "",
            sync.ended_ms,
        ]
        for uri, kind in targets:
            did = target_id(sync, uri, partition_key)
            keys.append(self.store.key(did))
            args += [did, uri, kind.value]
        return keys, args


def target_id(sync: SyncRef, uri: str, partition_key: str | None = None) -> str:
    """The id of ``sync``'s delivery to ``uri``, or of its partition there: a URI holds
    no space, so "uri key" names one (sync, key, URI) apart from the plain event."""
    target = uri if partition_key is None else f"{uri} {partition_key}"
    return delivery_id(sync.connector_id, sync.sync_id, target)


def partitions_uri(connector_id: str) -> str:
    """The URI of a sync's partitions delivery (never an asset: the worker expands it)."""
    return f"{PARTITIONS_SCHEME}{connector_id}"


def tables_uri(connector_id: str) -> str:
    """The URI of a sync's table-level delivery (never an asset: the worker expands it)."""
    return f"{TABLES_SCHEME}{connector_id}"


def _sync_of(event: Event) -> SyncRef:
    assert event.sync_id is not None
    return SyncRef(
        connector_id=event.connector_id,
        sync_id=event.sync_id,
        ended_ms=event.created_ms,
        status=event.status,
        connector_name=event.connector_name,
        connector_type=event.connector_type,
        group_id=event.group_id,
    )


def lineage_enabled(
    settings: Settings,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> bool:
    """Return whether syncs are sent as OpenLineage runs: ``FIVETRAN_EVENTS_LINEAGE`` on or
    off, or ``auto``: when the OpenLineage client would find a transport (its variables or
    an ``openlineage.yml``), unless ``OPENLINEAGE_DISABLED=true``."""
    if settings.lineage != "auto":
        return settings.lineage == "on"
    env = os.environ if environ is None else environ
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if any(env.get(v) for v in CLIENT_VARIABLES) or any(k.startswith(CLIENT_PREFIX) for k in env):
        return True
    cwd = Path.cwd() if cwd is None else cwd
    home = Path.home() if home is None else home
    return (cwd / "openlineage.yml").is_file() or (home / ".openlineage/openlineage.yml").is_file()


def event_type(kind: EventKind, status: str) -> str:
    """Return the OpenLineage event type of a sync_start, or of a sync_end's status:
    RESCHEDULED and unknown statuses are OTHER, which leaves the run open (Fivetran
    resumes a rescheduled sync; its real end closes the run)."""
    if kind is EventKind.SYNC_START:
        return "START"
    if status in SUCCESS_STATUSES:
        return "COMPLETE"
    if status in FAILURE_STATUSES:
        return "FAIL"
    if status in ABORT_STATUSES:
        return "ABORT"
    return "OTHER"


def lineage_targets(event: Event) -> list[str]:
    """Return ``event``'s lineage deliveries: one per start or end, none if imported."""
    if event.kind not in (EventKind.SYNC_START, EventKind.SYNC_END) or event.sync_id is None:
        return []
    if event.source not in (SOURCE_WEBHOOK, SOURCE_RECONCILED):
        return []
    kind = event_type(event.kind, event.status or "")
    if kind == "OTHER":
        return [f"{LINEAGE_PREFIX}OTHER:{event.status or ''}"]
    return [LINEAGE_PREFIX + kind]
