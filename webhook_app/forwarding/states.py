"""The states of a delivery, and which of them are final or indexed."""

from __future__ import annotations

from enum import Enum


class DeliveryState(str, Enum):
    """Where a delivery stands; stored as the record's ``state`` field."""

    PENDING = "pending"  # queued or being attempted
    RETRYING = "retrying"  # an attempt failed in a way that may pass; next_attempt_at
    DELIVERED = "delivered"  # Airflow has the event; event_id is its id
    UNDELIVERED = "undelivered"  # 404 (no DAG uses the URI) or retries ran out: replayable
    FAILED = "failed"  # Airflow refused it (4xx); the reason holds its answer


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
