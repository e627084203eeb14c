"""The worker's view of forwarding: attempts, the sweeper and replay behind one object."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import attempt as _attempt
from . import replay as _replay
from .attempt import AttemptResult
from .parts import WorkerParts
from .record import Delivery
from .states import DeliveryState
from .sweep import SWEEP_BATCH, sweep

__all__ = ["AttemptResult", "DeliveryState", "Forwarder"]


class Forwarder(WorkerParts):
    """Make forwarding attempts, schedule retries, sweep due deliveries, replay."""

    def attempt(self, did: str) -> AttemptResult:
        """Make one attempt at delivery ``did`` (attempt.py)."""
        return _attempt.attempt(self, did)

    def settles_at(self, d: Delivery) -> int | None:
        return _attempt.settles_at(self, d)

    def backoff_seconds(self, attempts: int, retry_after: float | None) -> float:
        return _attempt.backoff_seconds(self, attempts, retry_after)

    def build_extra(self, d: Delivery) -> dict[str, Any]:
        return _attempt.build_extra(self, d)

    def sweep(self, now: int | None = None, limit: int = SWEEP_BATCH) -> int:
        """Queue every due delivery (sweep.py)."""
        return sweep(self, now, limit)

    def replay(self, ids: Iterable[str]) -> list[str]:
        """Replay deliveries that were not delivered (replay.py)."""
        return _replay.replay(self, ids)

    def forward_since(self, since_ms: int) -> tuple[list[str], list[str], int]:
        return _replay.forward_since(self, since_ms)

    def deliveries_of_sync(self, sync_id: str, connector_id: str | None = None) -> list[str]:
        return _replay.deliveries_of_sync(self, sync_id, connector_id)
