"""Forwarding successful syncs to Airflow datasets, exactly once per (sync, URI).

The worker side is not imported here, so the web process stays free of ``requests``.
"""

from __future__ import annotations

from fivetran_events.deliveries import FINAL, INDEXED, Delivery, DeliveryKind, DeliveryState

from .enqueue import Enqueuer
from .store import DeliveryStore, attach_forwarding
from .sweeper import FORWARD_JOB, forward_job_id

__all__ = [
    "FINAL",
    "FORWARD_JOB",
    "INDEXED",
    "Delivery",
    "DeliveryKind",
    "DeliveryState",
    "DeliveryStore",
    "Enqueuer",
    "attach_forwarding",
    "forward_job_id",
]
