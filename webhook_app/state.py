"""The clients one app instance uses, kept in ``app.extensions`` (never module globals)."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from flask import current_app

from fivetran_events import HistoryReader, HistoryWriter, Settings
from fivetran_events.freshness import Freshness

from .forwarding.enqueue import Enqueuer, build_enqueuer

EXTENSION = "fivetran_events"


@dataclass
class State:
    settings: Settings
    redis: redis.Redis
    writer: HistoryWriter
    reader: HistoryReader
    enqueuer: Enqueuer

    @classmethod
    def from_settings(cls, settings: Settings) -> State:
        client = settings.redis_client()
        return cls(
            settings=settings,
            redis=client,
            writer=HistoryWriter(client, settings.key_prefix, settings.retention_ms),
            reader=HistoryReader(
                client,
                settings.key_prefix,
                settings.max_sync_duration_ms,
                Freshness.from_settings(settings),
            ),
            enqueuer=build_enqueuer(settings, client),
        )

    @property
    def forwarding(self) -> bool:
        """Whether successes are forwarded: only with an Airflow to forward them to."""
        return self.settings.airflow_url is not None

    @property
    def on_success(self) -> Enqueuer | None:
        """What a sync's write adds: its deliveries, due now, in its script. Nothing without
        Airflow or lineage: no worker would forward them, and they would pile up."""
        return self.enqueuer if self.forwarding or self.enqueuer.lineage else None


def state() -> State:
    """Return the current app's State."""
    return current_app.extensions[EXTENSION]  # type: ignore[no-any-return]
