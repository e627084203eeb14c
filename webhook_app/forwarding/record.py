"""One delivery as stored in its Redis hash, and the name of its RQ jobs."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from fivetran_events.timeutil import iso

from .states import DeliveryState


def forward_job_id(delivery: str, tag: str | int | None = None) -> str:
    """Name an attempt's RQ job (RQ allows only letters, digits, '_' and '-' in ids)."""
    digest = hashlib.blake2b(delivery.encode(), digest_size=12).hexdigest()
    return f"fwd-{digest}" if tag is None else f"fwd-{digest}-{tag}"


def text(value: Any) -> str:
    """Decode a Redis reply (bytes, or str on a decoding client) to ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Delivery:
    """One delivery as stored in its hash."""

    id: str
    fields: dict[str, str]

    @classmethod
    def from_reply(cls, did: str, raw: dict[Any, Any]) -> Delivery:
        """Build it from an HGETALL reply."""
        return cls(did, {text(k): text(v) for k, v in raw.items()})

    def get(self, name: str) -> str | None:
        return self.fields.get(name) or None

    def ms(self, name: str) -> int | None:
        value = self.get(name)
        return int(value) if value else None

    @property
    def state(self) -> DeliveryState:
        return DeliveryState(self.fields.get("state", "pending"))

    @property
    def uri(self) -> str:
        return self.fields["uri"]

    @property
    def received_ms(self) -> int:
        """When the webhook received its sync (the score of its listing entry)."""
        return self.ms("received_ms") or 0

    @property
    def window_ms(self) -> int:
        """When its retry window opened: receipt or the last replay (its index's score)."""
        return self.ms("window_ms") or self.received_ms

    def to_dict(self) -> dict[str, Any]:
        """The public view (API, CLI)."""
        f = self.fields
        event_id = self.get("event_id")
        return {
            "delivery_id": self.id,
            "connector_id": f.get("connector_id"),
            "sync_id": f.get("sync_id"),
            "uri": f.get("uri"),
            "state": self.state.value,
            "attempts": int(f.get("attempts") or 0),
            "airflow_event_id": int(event_id) if event_id else None,
            "airflow_event_at": self.get("event_at"),
            "reason": self.get("reason"),
            "received_at": iso(self.ms("received_ms")),
            "next_attempt_at": (
                iso(self.ms("next_attempt_ms")) if self.state is DeliveryState.RETRYING else None
            ),
            "updated_at": iso(self.ms("updated_ms")),
        }
