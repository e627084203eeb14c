"""Forwarding successful syncs to Airflow datasets, exactly once per (sync, URI).

One module per concept, split so that the web process imports only what it needs (what
a delivery record holds, its states and its reader are ``fivetran_events.deliveries``):

- ``store``: the Redis records, their listing, the per-state index, and the deliveries
  shaped for the syncs listing (``attach_forwarding``);
- ``enqueue``: the web side, creating deliveries inside the webhook's one script, due
  now (it imports no HTTP client), and the RQ jobs' names and options (``queue_jobs``,
  which the worker's sweeper calls).

The worker side (``attempt``, ``replay``, ``worker`` with the sweeper) talks to Airflow
and is imported only by the worker and the CLI; this ``__init__`` does not import it, so
``import webhook_app.forwarding`` stays free of ``requests``.
"""

from __future__ import annotations

from fivetran_events.deliveries import FINAL, INDEXED, Delivery, DeliveryState

from .enqueue import FORWARD_JOB, Enqueuer, forward_job_id
from .store import DeliveryStore, attach_forwarding

__all__ = [
    "FINAL",
    "FORWARD_JOB",
    "INDEXED",
    "Delivery",
    "DeliveryState",
    "DeliveryStore",
    "Enqueuer",
    "attach_forwarding",
    "forward_job_id",
]
