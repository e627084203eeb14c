"""The clients one app instance uses, kept in ``app.extensions`` (never module globals)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import redis
from flask import current_app
from redis.client import Pipeline
from rq import Queue

from fivetran_events import Event, HistoryReader, HistoryWriter, Settings
from fivetran_events.timeutil import iso

from .jobs import FORWARD_SYNC

EXTENSION = "fivetran_events"


def forward_job_id(event: Event) -> str:
    """Name the forwarding job after the completion, so it is found (and never doubled).

    RQ allows only letters, digits, '_' and '-' in job ids, and connector ids may hold
    '.', so the id is a digest of (connector, sync, end time).
    """
    key = f"{event.connector_id}\x1f{event.sync_id}\x1f{event.created_ms}"
    return "forward-" + hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


@dataclass
class State:
    settings: Settings
    redis: redis.Redis
    writer: HistoryWriter
    reader: HistoryReader
    queue: Queue

    @classmethod
    def from_settings(cls, settings: Settings) -> State:
        client = redis.Redis.from_url(
            settings.redis_url,
            socket_timeout=settings.redis_timeout_seconds,
            socket_connect_timeout=settings.redis_timeout_seconds,
        )
        return cls(
            settings=settings,
            redis=client,
            writer=HistoryWriter(client, settings.key_prefix, settings.retention_ms),
            reader=HistoryReader(client, settings.key_prefix, settings.max_sync_duration_ms),
            queue=Queue(settings.queue_name, connection=client),
        )

    def enqueue_forward(self, pipe: Pipeline, event: Event) -> None:
        """Queue the forwarding job inside the history write's MULTI block."""
        self.queue.enqueue(
            FORWARD_SYNC,
            kwargs=forward_payload(event),
            job_id=forward_job_id(event),
            pipeline=pipe,
            result_ttl=7 * 86_400,
            failure_ttl=30 * 86_400,
            description=f"forward sync {event.sync_id} of {event.connector_id}",
        )


def forward_payload(event: Event) -> dict[str, Any]:
    """What the forwarding job needs to know about the sync."""
    return {
        "connector_id": event.connector_id,
        "connector_name": event.connector_name,
        "connector_type": event.connector_type,
        "group_id": event.group_id,
        "sync_id": event.sync_id,
        "status": event.status,
        "ended_at": iso(event.created),
    }


def state() -> State:
    """Return the current app's State."""
    return current_app.extensions[EXTENSION]  # type: ignore[no-any-return]
