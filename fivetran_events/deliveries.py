"""A delivery to Airflow as its Redis hash stores it: its fields, its states, one reader.

The forwarding side (webhook_app.forwarding) writes these hashes; the read API, the CLI
and the Airflow plugin's UI read them. Both import what a record holds from here, so a
field is named once, and the plugin never imports webhook_app.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from .redis_url import as_text
from .timeutil import iso


class DeliveryState(str, Enum):
    """Where a delivery stands; stored as the record's ``state`` field."""

    PENDING = "pending"  # queued or being attempted
    RETRYING = "retrying"  # an attempt failed in a way that may pass; next_attempt_at
    DELIVERED = "delivered"  # Airflow has the event; event_id is its id
    UNDELIVERED = "undelivered"  # 404 (no DAG uses the URI) or retries ran out: replayable
    FAILED = "failed"  # Airflow refused it (4xx); the reason holds its answer


class DeliveryKind(str, Enum):
    """What a delivery sends, and so which sender attempts it; stored as ``kind``."""

    ASSET = "asset"  # an asset (dataset) event to Airflow
    TABLES = "tables"  # a sync's table-level delivery, expanded into one ASSET per table
    LINEAGE = "lineage"  # an OpenLineage run event


#: States no attempt leaves (only a replay does).
FINAL = frozenset({DeliveryState.DELIVERED, DeliveryState.UNDELIVERED, DeliveryState.FAILED})
#: States with an index of their own (``keys.delivery_state_key``): the ones an on-call
#: person counts. Delivered ones are the bulk and need no index.
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
    """The names of a record's fields (what the record script and the attempts write)."""

    CONNECTOR_ID = "connector_id"
    SYNC_ID = "sync_id"
    URI = "uri"
    KIND = "kind"  # DeliveryKind, written when the record is created
    STATE = "state"
    ATTEMPTS = "attempts"
    EVENT_ID = "event_id"  # Airflow's id of the asset event, once delivered
    EVENT_AT = "event_at"
    REASON = "reason"
    RECEIVED_MS = "received_ms"  # when the webhook received its sync
    WINDOW_MS = "window_ms"  # when its retry window opened: receipt or the last replay
    NEXT_ATTEMPT_MS = "next_attempt_ms"
    UPDATED_MS = "updated_ms"


@dataclass(frozen=True)
class Delivery:
    """One delivery as stored in its hash."""

    id: str
    fields: dict[str, str]

    @classmethod
    def from_reply(cls, did: str, raw: dict[Any, Any]) -> Delivery:
        """Build it from an HGETALL reply."""
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
        """When the webhook received its sync (the score of its listing entry)."""
        return self.ms(Field.RECEIVED_MS) or 0

    @property
    def window_ms(self) -> int:
        """When its retry window opened: receipt or the last replay (its index's score)."""
        return self.ms(Field.WINDOW_MS) or self.received_ms

    def to_dict(self) -> dict[str, Any]:
        """The public view (API, CLI)."""
        f = self.fields
        event_id = self.get(Field.EVENT_ID)
        return {
            "delivery_id": self.id,
            "connector_id": f.get(Field.CONNECTOR_ID),
            "sync_id": f.get(Field.SYNC_ID),
            "uri": f.get(Field.URI),
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
