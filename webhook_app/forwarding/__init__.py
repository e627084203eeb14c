"""Forwarding successful syncs to Airflow datasets, exactly once per (sync, URI).

One module per concept, split so that the web process imports only what it needs (what
a delivery record holds, its kinds, its states and its reader are
``fivetran_events.deliveries``):

- ``store``: the Redis records, their listing, the per-state index, and the deliveries
  shaped for the syncs listing (``attach_forwarding``);
- ``enqueue``: the web side, creating deliveries, each with its kind, inside the
  webhook's one script, due now (it imports no HTTP client);
- ``sweeper``: queues the RQ jobs of due deliveries (the jobs' names and options).

The worker side talks to Airflow and OpenLineage and is imported only by the worker and
the CLI: ``forwarder`` (the ``Forwarder``: a lease per attempt, one sender per kind, replay),
``recorder`` (the state changes every sender records), the senders ``asset``, ``tables``
and ``lineage``. This ``__init__`` does not import them, so
``import webhook_app.forwarding`` stays free of ``requests``.
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
