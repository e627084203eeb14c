"""Forwarding successful syncs to Airflow datasets, exactly once per (sync, URI).

One module per concept, split so that the web process imports only what it needs:

- ``states``: the delivery states and which are final;
- ``record``: one delivery as stored (``Delivery``) and its RQ job's name;
- ``store``: the Redis records, their listing and the per-state index;
- ``enqueue``: the web side, creating deliveries inside the webhook's one script and
  queuing their RQ jobs after it (it imports no HTTP client);
- ``listing``: the deliveries shaped for the API and the CLI.

The worker side (``attempt``, ``sweep``, ``replay``, ``worker``) talks to
Airflow and is imported only by the worker and the CLI; this ``__init__`` does not import
it, so ``import webhook_app.forwarding`` stays free of ``requests``.
"""

from __future__ import annotations

from .enqueue import FORWARD_JOB, Enqueuer
from .listing import attach_forwarding
from .record import Delivery, forward_job_id
from .states import FINAL, INDEXED, DeliveryState
from .store import DeliveryStore

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
