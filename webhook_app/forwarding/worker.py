"""The worker's view of forwarding: attempts, the sweeper and replay behind one object."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable

from fivetran_events import Settings
from fivetran_events.timeutil import now_ms

from ..airflow_client import AirflowClient, AirflowError
from . import attempt as _attempt
from . import replay as _replay
from .asset_ids import RedisAssetIds
from .attempt import AttemptResult
from .enqueue import Enqueuer, keep_delivered_ms, record_ttl_ms
from .states import DeliveryState
from .store import DeliveryStore
from .sweep import SWEEP_BATCH, sweep

__all__ = ["AttemptResult", "DeliveryState", "Forwarder"]

log = logging.getLogger(__name__)


class Forwarder:
    """Make forwarding attempts, schedule retries, sweep due deliveries, replay.

    It has a delivery store, an enqueuer (to queue attempts) and an Airflow client (None:
    replay and listings only). The clock and the jitter are read at each call, so a test
    can swap them.
    """

    def __init__(
        self,
        settings: Settings,
        store: DeliveryStore,
        enqueuer: Enqueuer,
        airflow: AirflowClient | None,
        *,
        clock: Callable[[], int] = now_ms,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings
        self.store = store
        self.enqueuer = enqueuer
        self.airflow = airflow
        self.redis = store.client
        self.clock = clock
        self.rng = rng
        self.lease_ms = enqueuer.lease_ms
        self.margin_ms = int(settings.forward_unknown_outcome_seconds * 1000)
        self.keep_ms = keep_delivered_ms(settings)
        self.record_ttl_ms = record_ttl_ms(settings)
        if airflow is not None and airflow.shared_assets is None:
            # The pool's processes find each other's asset ids (asset_ids.py).
            airflow.shared_assets = RedisAssetIds(self.redis, settings.key_prefix)

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

    def sweep(self, now: int | None = None, limit: int = SWEEP_BATCH) -> int:
        """Queue every due delivery (sweep.py)."""
        return sweep(self.enqueuer, self.clock() if now is None else now, limit)

    def replay(self, ids: Iterable[str]) -> list[str]:
        """Replay deliveries that were not delivered (replay.py)."""
        return _replay.replay(self.enqueuer, ids, self.clock)

    def forward_since(self, since_ms: int) -> tuple[list[str], list[str], int]:
        """Forward every success that ended at or after ``since_ms`` (replay.py)."""
        return _replay.forward_since(self.enqueuer, since_ms, self.clock)

    def deliveries_of_sync(self, sync_id: str, connector_id: str | None = None) -> list[str]:
        return _replay.deliveries_of_sync(self.store, sync_id, connector_id)
