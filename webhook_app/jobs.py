"""RQ jobs run by ``fivetran-events worker``; they must be importable by the workers.

The worker builds one Forwarder (Redis, queue, Airflow client with its cached JWT and
asset ids) and hands it to ``configure``; jobs run in the worker's process (RQ's
SimpleWorker), so that cache lives as long as the worker. A job run anywhere else builds
its Forwarder from the ``FIVETRAN_EVENTS_*`` environment.
"""

from __future__ import annotations

from typing import Any

from rq import Queue

from fivetran_events import Settings, load_settings

from . import logs
from .airflow_client import AirflowClient
from .forwarding.worker import Forwarder

_forwarder: Forwarder | None = None


def build_forwarder(settings: Settings, with_airflow: bool = True) -> Forwarder:
    """Build a Forwarder from ``settings`` (without Airflow: replay and listings only)."""
    client = settings.redis_client()
    airflow = AirflowClient.from_settings(settings) if with_airflow else None
    return Forwarder(
        settings,
        client,
        airflow,
        Queue(settings.queue_name, connection=client),
        settings.uri_map(),
    )


def configure(forwarder: Forwarder | None) -> None:
    """Make ``forwarder`` the one this process's jobs use (None: build from the environment)."""
    global _forwarder
    _forwarder = forwarder


def current_forwarder() -> Forwarder:
    global _forwarder
    if _forwarder is None:
        _forwarder = build_forwarder(load_settings())
    return _forwarder


def forward_sync(delivery: str) -> dict[str, Any]:
    """Make one attempt at forwarding a successful sync to one Airflow dataset.

    Its ids are bound for the attempt, so every line it logs names the delivery.
    """
    connector_id, sync_id, _ = [*delivery.split(":", 2), "", ""][:3]
    with logs.bound(delivery_id=delivery, connector_id=connector_id, sync_id=sync_id):
        return current_forwarder().attempt(delivery).to_dict()
