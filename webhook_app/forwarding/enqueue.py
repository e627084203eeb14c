"""The web side of forwarding: which deliveries a sync gets, each with its kind.

The store creates them in a chunk of the history's one write script, so the webhook does no RQ work
and a crash after its script loses nothing: a worker's sweeper queues their jobs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import redis
from redis.typing import EncodableT

from fivetran_events import Event, Settings
from fivetran_events.deliveries import DeliveryKind, SyncRef
from fivetran_events.history.writer import TRIM_EVERY, trims
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

from .store import DeliveryStore, Target, delivery_store

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


def build_enqueuer(settings: Settings, client: redis.Redis) -> Enqueuer:
    """Build the enqueuer of a process, the web app's and the worker's alike."""
    return Enqueuer(
        settings,
        delivery_store(settings, client),
        UriMap.from_settings(settings),
        lineage=lineage_enabled(settings),
    )


class Enqueuer:
    """Choose a sync's deliveries; the store's chunk of the history's write creates them."""

    #: The chunk of the history's record script (``OnSuccess.lua``).
    lua = DeliveryStore.create_chunk

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
        self.trim_every = trim_every

    def __call__(self, event: Event) -> tuple[list[str], list[EncodableT]]:
        """Return the keys and arguments that create ``event``'s deliveries in its script."""
        targets = self.targets(event) if self.airflow and event.is_success else []
        if targets and self._partitioned(event):
            targets.append((partitions_uri(event.connector_id), DeliveryKind.PARTITIONS))
        if self.lineage:
            targets += [(t, DeliveryKind.LINEAGE) for t in lineage_targets(event)]
        if not targets:
            return [], []
        trim = trims(event, self.trim_every)
        return self.store.creation(sync_of(event), targets, self.clock(), trim)

    def _partitioned(self, event: Event) -> bool:
        """Whether a success gets a delivery for its connector's partitions (the worker
        expands it: partitions.py). A table's come with its expansion (tables.py); an
        import posts none (``replay --partitions`` does, when asked)."""
        s = self.settings
        return bool(
            s.partition_grain and s.asset_granularity != "table" and event.source != SOURCE_IMPORTED
        )

    def targets(self, event: Event) -> list[Target]:
        granularity = self.settings.asset_granularity
        out: list[Target] = []
        if granularity != "table":
            uris = self.uri_map.uris(
                event.connector_id, event.connector_name, event.connector_type, event.group_id
            )
            out += [(u, DeliveryKind.ASSET) for u in uris]
        if granularity != "connector":
            out.append((tables_uri(event.connector_id), DeliveryKind.TABLES))
        return out


def partitions_uri(connector_id: str) -> str:
    """The URI of a sync's partitions delivery (never an asset: the worker expands it)."""
    return f"{PARTITIONS_SCHEME}{connector_id}"


def tables_uri(connector_id: str) -> str:
    """The URI of a sync's table-level delivery (never an asset: the worker expands it)."""
    return f"{TABLES_SCHEME}{connector_id}"


def sync_of(event: Event) -> SyncRef:
    """The success ``event`` is about, as its deliveries carry it."""
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
    """Whether syncs go as OpenLineage runs: ``FIVETRAN_EVENTS_LINEAGE`` on or off, or ``auto``:
    when the client finds a transport (variables, openlineage.yml) and not OPENLINEAGE_DISABLED."""
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
