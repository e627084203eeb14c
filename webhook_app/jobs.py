"""RQ jobs run by ``fivetran-events worker``; they must be importable by the workers.

The worker builds one Forwarder (Redis, queue, Airflow client with its cached JWT and
asset ids) and hands it to ``configure``; jobs run in the worker's process (RQ's
SimpleWorker), so that cache lives as long as the worker. A job run anywhere else builds
its Forwarder from the ``FIVETRAN_EVENTS_*`` environment.
"""

from __future__ import annotations

from typing import Any

import redis
from rq import Queue

from fivetran_events import Settings, load_settings
from fivetran_events.uris import load_uri_map_from_settings

from . import logs
from .airflow_client import AirflowClient
from .forward import FORWARD_JOB, Forwarder

#: The dotted path the webhook enqueues (a string, so the web process never runs it).
FORWARD_SYNC = FORWARD_JOB

_forwarder: Forwarder | None = None


def build_forwarder(settings: Settings, with_airflow: bool = True) -> Forwarder:
    """Build a Forwarder from ``settings`` (the web process passes with_airflow=False)."""
    client = redis.Redis.from_url(
        settings.redis_url,
        socket_timeout=settings.redis_timeout_seconds,
        socket_connect_timeout=settings.redis_timeout_seconds,
    )
    airflow = AirflowClient.from_settings(settings) if with_airflow else None
    return Forwarder(
        settings,
        client,
        airflow,
        Queue(settings.queue_name, connection=client),
        load_uri_map_from_settings(settings),
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
        return current_forwarder().attempt(delivery)
