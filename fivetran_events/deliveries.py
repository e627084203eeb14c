"""What a successful sync sends to Airflow: the asset event's ``extra``, and the delivery record
(a Redis hash) tracking it. Here so the plugin's UI reads records without importing webhook_app;
the REST forwarder and the Airflow watcher send the same ``extra``, built sans-io by ``assemble``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from .history import decode_completion
from .history.reader import ConnectorRecord, decode_resyncs, extra_commands, resync_commands
from .keys import ConnectorKeys
from .text import as_text
from .timeutil import iso

if TYPE_CHECKING:
    from .settings import Settings

#: What ``extra["source"]`` says, so a consumer can tell our events from others.
SOURCE = "fivetran-events"


class DeliveryState(str, Enum):
    PENDING = "pending"  # queued or being attempted
    RETRYING = "retrying"  # an attempt failed in a way that may pass; next_attempt_at
    DELIVERED = "delivered"  # Airflow has the event; event_id is its id
    UNDELIVERED = "undelivered"  # 404 (no DAG uses the URI) or retries ran out: replayable
    FAILED = "failed"  # Airflow refused it (4xx); the reason holds its answer


class DeliveryKind(str, Enum):
    ASSET = "asset"  # an asset (dataset) event to Airflow
    TABLES = "tables"  # a sync's table-level delivery, expanded into one ASSET per table
    PARTITIONS = "partitions"  # a sync's partitions, expanded into one ASSET per (URI, key)
    LINEAGE = "lineage"  # an OpenLineage run event


#: States no attempt leaves (only a replay does).
FINAL = frozenset({DeliveryState.DELIVERED, DeliveryState.UNDELIVERED, DeliveryState.FAILED})
#: States with an index of their own: delivered ones are the bulk and need none.
INDEXED = (
    DeliveryState.PENDING,
    DeliveryState.RETRYING,
    DeliveryState.UNDELIVERED,
    DeliveryState.FAILED,
)
#: The states, the one that needs attention first (the UI shows a sync's worst).
BY_ATTENTION = (
    DeliveryState.FAILED,
    DeliveryState.UNDELIVERED,
    DeliveryState.RETRYING,
    DeliveryState.PENDING,
    DeliveryState.DELIVERED,
)


class Field:
    """Every field of a delivery record (only webhook_app.forwarding.store writes them)."""

    # Written when the record is created: the sync and where it goes.
    CONNECTOR_ID = "connector_id"
    SYNC_ID = "sync_id"
    CONNECTOR_NAME = "connector_name"
    CONNECTOR_TYPE = "connector_type"
    GROUP_ID = "group_id"
    STATUS = "status"  # the sync_end's status
    ENDED_MS = "ended_ms"  # the event's own time (a start's, for a lineage START)
    URI = "uri"
    KIND = "kind"  # DeliveryKind: which sender attempts it
    PARTITION_KEY = "partition_key"  # an ASSET delivery's partition (none: the plain event)
    TABLE = "table"  # a table's ASSET delivery: schema.table (it keeps a shorter life)
    RECEIVED_MS = "received_ms"  # when the webhook received its sync
    WINDOW_MS = "window_ms"  # when its retry window opened: receipt or the last replay
    # Written by attempts.
    STATE = "state"
    ATTEMPTS = "attempts"
    FIRST_ATTEMPT_MS = "first_attempt_ms"
    EXTRA = "extra"  # JSON: what every attempt sends (an asset event's extra, lineage's details)
    INFLIGHT_MS = "inflight_ms"  # a POST may be on its way since then (asset events)
    UNKNOWN_MS = "unknown_ms"  # that POST's answer was lost then
    NEXT_ATTEMPT_MS = "next_attempt_ms"
    REASON = "reason"
    UPDATED_MS = "updated_ms"
    JOB = "job"  # the RQ job of its latest claim (the sweeper skips one still queued)
    # Written when delivered, by kind.
    EVENT_ID = "event_id"  # Airflow's id of the asset event, once delivered
    EVENT_AT = "event_at"
    RECOVERED = "recovered"  # "1": found in Airflow after an attempt died before recording
    TABLES = "tables"  # a TABLES delivery: consumed/listed tables
    PARTITIONS = "partitions"  # a PARTITIONS delivery: JSON list of the keys it created
    PARTITIONS_SKIPPED = "partitions_skipped"  # keys over FIVETRAN_EVENTS_PARTITION_MAX_KEYS
    LINEAGE_EVENT = "lineage_event"  # a LINEAGE delivery: the event type it sent


#: The marks of a POST whose outcome is open, dropped by every final state but one
#: that gives up while an earlier POST's outcome is still open.
MARKS = (Field.INFLIGHT_MS, Field.UNKNOWN_MS)


@dataclass(frozen=True)
class Lifetimes:
    """How long an attempt holds a delivery and how long its record lives (from Settings)."""

    #: One attempt's lease: longer than its longest attempt (four requests, each up to a
    #: connect and a read timeout, a 401 doubling one).
    lease_ms: int
    #: How long a POST whose answer was lost may still land in Airflow.
    margin_ms: int
    #: A delivery's retry window, from its receipt or its last replay.
    retry_window_ms: int
    #: How long a delivered record stays after Airflow took its event.
    keep_delivered_ms: int

    @classmethod
    def from_settings(cls, s: Settings) -> Lifetimes:
        return cls(
            lease_ms=int(max(s.forward_lease_seconds, 12 * s.airflow_timeout_seconds) * 1000),
            margin_ms=int(s.forward_unknown_outcome_seconds * 1000),
            retry_window_ms=int(s.forward_retry_hours * 3_600_000),
            keep_delivered_ms=int(s.forward_keep_delivered_hours * 3_600_000),
        )

    @property
    def record_ttl_ms(self) -> int:
        """How long a record not delivered lives after its retry window opened: the
        window, the last attempt's lease and unknown-outcome margin, then the keep time."""
        return self.retry_window_ms + self.lease_ms + self.margin_ms + self.keep_delivered_ms

    @property
    def table_keep_ms(self) -> int:
        """How long a delivered table's record stays: past any re-run of its sync's
        expansion, at least an hour, at most the keep time."""
        return min(self.keep_delivered_ms, max(3_600_000, 4 * (self.lease_ms + self.margin_ms)))

    def final_ttl_ms(self, state: DeliveryState, d: Delivery, now: int) -> int:
        """How long a record in a final ``state`` stays from ``now``: delivered, the keep
        time (a table's shorter: its sync's table-level delivery is what a redelivery
        finds); given up, until its window and the keep time are over."""
        if state is DeliveryState.DELIVERED:
            return self.table_keep_ms if d.get(Field.TABLE) else self.keep_delivered_ms
        return max(d.window_ms + self.record_ttl_ms - now, self.keep_delivered_ms)


@dataclass(frozen=True)
class Delivery:
    id: str
    fields: dict[str, str]

    @classmethod
    def from_reply(cls, did: str, raw: dict[Any, Any]) -> Delivery:
        return cls(did, {as_text(k): as_text(v) for k, v in raw.items()})

    def get(self, name: str) -> str | None:
        return self.fields.get(name) or None

    def ms(self, name: str) -> int | None:
        value = self.get(name)
        return int(value) if value else None

    @property
    def state(self) -> DeliveryState:
        return DeliveryState(self.fields.get(Field.STATE, DeliveryState.PENDING.value))

    @property
    def uri(self) -> str:
        return self.fields[Field.URI]

    @property
    def kind(self) -> DeliveryKind:
        return DeliveryKind(self.fields[Field.KIND])

    @property
    def received_ms(self) -> int:
        return self.ms(Field.RECEIVED_MS) or 0

    @property
    def window_ms(self) -> int:
        return self.ms(Field.WINDOW_MS) or self.received_ms

    def to_dict(self) -> dict[str, Any]:
        f = self.fields
        event_id = self.get(Field.EVENT_ID)
        return {
            "delivery_id": self.id,
            "connector_id": f.get(Field.CONNECTOR_ID),
            "sync_id": f.get(Field.SYNC_ID),
            "uri": f.get(Field.URI),
            "partition_key": self.get(Field.PARTITION_KEY),
            "state": self.state.value,
            "attempts": int(f.get(Field.ATTEMPTS) or 0),
            "airflow_event_id": int(event_id) if event_id else None,
            "airflow_event_at": self.get(Field.EVENT_AT),
            "reason": self.get(Field.REASON),
            "received_at": iso(self.ms(Field.RECEIVED_MS)),
            "next_attempt_at": (
                iso(self.ms(Field.NEXT_ATTEMPT_MS))
                if self.state is DeliveryState.RETRYING
                else None
            ),
            "updated_at": iso(self.ms(Field.UPDATED_MS)),
        }


@dataclass(frozen=True)
class SyncRef:
    """The successful sync an event is about, and its connector's metadata."""

    connector_id: str
    sync_id: str
    ended_ms: int
    status: str | None = "SUCCESSFUL"
    connector_name: str | None = None
    connector_type: str | None = None
    group_id: str | None = None

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> SyncRef:
        return cls(
            connector_id=fields[Field.CONNECTOR_ID],
            sync_id=fields[Field.SYNC_ID],
            ended_ms=int(fields[Field.ENDED_MS]),
            status=fields.get(Field.STATUS) or None,
            connector_name=fields.get(Field.CONNECTOR_NAME) or None,
            connector_type=fields.get(Field.CONNECTOR_TYPE) or None,
            group_id=fields.get(Field.GROUP_ID) or None,
        )

    @classmethod
    def from_record(cls, record: ConnectorRecord, sync_id: str, ended_ms: int) -> SyncRef:
        return cls(
            connector_id=record.connector_id,
            sync_id=sync_id,
            ended_ms=ended_ms,
            connector_name=record.name,
            connector_type=record.type,
            group_id=record.group,
        )


def assemble(
    ref: SyncRef, same_end: Sequence[Any], first_start: Any, resync_members: Sequence[Any]
) -> dict[str, Any]:
    # The start of the attempt that succeeded (a retried sync id has several), else the first.
    started = next(
        (
            c.started_ms
            for c in (decode_completion(m, s) for m, s in same_end)
            if c.sync_id == ref.sync_id and c.started_ms is not None
        ),
        first_start,
    )
    resyncs = decode_resyncs(resync_members)
    whole = any(r.get("e") == "resync_connector" for r in resyncs)
    tables = sorted(
        {t for r in resyncs if r.get("e") == "resync_table" for t in r.get("tables") or []}
    )
    extra: dict[str, Any] = {
        "source": SOURCE,
        "connector_id": ref.connector_id,
        "connector_name": ref.connector_name,
        "connector_type": ref.connector_type,
        "group_id": ref.group_id,
        "sync_id": ref.sync_id,
        "status": ref.status,
        "started_at": iso(int(started)) if started is not None else None,
        "ended_at": iso(ref.ended_ms),
        # The first success after a resync rewrote the data: consumers may need to
        # rebuild rather than append. resync_table names the tables it concerned.
        "full_refresh": bool(resyncs),
    }
    if tables and not whole:
        extra["full_refresh_tables"] = tables
    return extra


def extra_for(client: Any, prefix: str, ref: SyncRef) -> dict[str, Any]:
    keys = ConnectorKeys(prefix, ref.connector_id)
    pipe = client.pipeline(transaction=False)
    extra_commands(pipe, keys, ref.sync_id, ref.ended_ms)
    same_end, first_start, previous = pipe.execute()
    pipe = client.pipeline(transaction=False)
    resync_commands(pipe, keys, ref.ended_ms, previous)
    (resyncs,) = pipe.execute()
    return assemble(ref, same_end, first_start, resyncs)


async def aextra_for(client: Any, prefix: str, ref: SyncRef) -> dict[str, Any]:
    keys = ConnectorKeys(prefix, ref.connector_id)
    pipe = client.pipeline(transaction=False)
    extra_commands(pipe, keys, ref.sync_id, ref.ended_ms)
    same_end, first_start, previous = await pipe.execute()
    pipe = client.pipeline(transaction=False)
    resync_commands(pipe, keys, ref.ended_ms, previous)
    (resyncs,) = await pipe.execute()
    return assemble(ref, same_end, first_start, resyncs)
