"""The clients one app instance uses, kept in ``app.extensions`` (never module globals)."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from flask import current_app
from rq import Queue

from fivetran_events import HistoryReader, HistoryWriter, Settings
from fivetran_events.uris import UriMap

from .forwarding import Enqueuer
from .forwarding.enqueue import delivery_store

EXTENSION = "fivetran_events"


@dataclass
class State:
    settings: Settings
    redis: redis.Redis
    writer: HistoryWriter
    reader: HistoryReader
    queue: Queue
    enqueuer: Enqueuer

    @classmethod
    def from_settings(cls, settings: Settings) -> State:
        client = settings.redis_client()
        queue = Queue(settings.queue_name, connection=client)
        return cls(
            settings=settings,
            redis=client,
            writer=HistoryWriter(client, settings.key_prefix, settings.retention_ms),
            reader=HistoryReader(client, settings.key_prefix, settings.max_sync_duration_ms),
            queue=queue,
            # The web process only creates deliveries; workers talk to Airflow.
            enqueuer=Enqueuer(
                settings, delivery_store(settings, client), queue, UriMap.from_settings(settings)
            ),
        )

    @property
    def forwarding(self) -> bool:
        """Whether successes are forwarded: only with an Airflow to forward them to."""
        return self.settings.airflow_url is not None

    @property
    def on_success(self) -> Enqueuer | None:
        """What a successful sync's write adds: its deliveries, then their RQ jobs.

        One delivery and one RQ job per dataset URI of the connector (forwarding/enqueue.py).
        Without ``FIVETRAN_EVENTS_AIRFLOW_URL`` nothing: no worker would ever take those
        jobs, and records and jobs without an expiry would pile up for good (turning
        forwarding on later forwards the past only when asked: ``replay --since``).
        """
        return self.enqueuer if self.forwarding else None


def state() -> State:
    """Return the current app's State."""
    return current_app.extensions[EXTENSION]  # type: ignore[no-any-return]
