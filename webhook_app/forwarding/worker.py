"""The worker's view of forwarding: attempts, the sweeper and replay behind one object."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ..airflow_client import AirflowError
from . import attempt as _attempt
from . import replay as _replay
from .asset_ids import RedisAssetIds
from .attempt import AttemptResult
from .parts import WorkerParts
from .record import Delivery
from .states import DeliveryState
from .sweep import SWEEP_BATCH, sweep

__all__ = ["AttemptResult", "DeliveryState", "Forwarder"]

log = logging.getLogger(__name__)


class Forwarder(WorkerParts):
    """Make forwarding attempts, schedule retries, sweep due deliveries, replay."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.airflow is not None and self.airflow.shared_assets is None:
            # The pool's processes find each other's asset ids (asset_ids.py).
            self.airflow.shared_assets = RedisAssetIds(self.redis, self.settings.key_prefix)

    def warm_up(self) -> bool:
        """Fetch Airflow's version and a token now, so the first delivery does not wait.

        Called as a worker starts; a failure is only logged (the first attempt tries
        again and retries as usual). Return whether it succeeded.
        """
        if self.airflow is None:
            return False
        try:
            self.airflow.warm_up()
        except AirflowError as exc:
            log.warning("could not reach Airflow yet (the first attempt will try again): %s", exc)
            return False
        return True

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
