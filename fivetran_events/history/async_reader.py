"""The history reader over ``redis.asyncio``: the async twin of ``HistoryReader``'s decision.

The Airflow trigger runs in the triggerer's event loop, where a blocking Redis call
would stall every other deferred task, so it reads through this class. The queries and
their decoding are the sync reader's own (``queries.py``): one pipelined round trip of
O(log n) reads whatever the criterion, so a decision never holds the loop for longer
than one short await.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..decision import Criterion, Decision, Facts, decide
from ..keys import ConnectorKeys
from .queries import facts_commands, facts_from_results, running_from, target_and_criterion


class AsyncHistoryReader:
    """Fetch ``Facts`` and decide without blocking the event loop."""

    def __init__(self, client: Any, prefix: str, max_sync_duration_ms: int) -> None:
        self.client = client  # a redis.asyncio.Redis
        self.prefix = prefix
        self.max_sync_duration_ms = max_sync_duration_ms

    def keys(self, connector_id: str) -> ConnectorKeys:
        return ConnectorKeys(self.prefix, connector_id)

    async def decide(
        self,
        connector_id: str,
        target: datetime | int,
        *,
        criterion: Criterion | str = Criterion.ENDED_AFTER,
        propagate_failures_forward: bool = True,
        always_wait_when_syncing: bool = False,
        wait_when_paused: bool = False,
        now: int | None = None,
    ) -> Decision:
        """Decide for ``connector_id`` at ``target``, as ``HistoryReader.decide`` does."""
        target_ms, crit = target_and_criterion(target, criterion)
        facts = await self.facts(
            connector_id, target_ms, now=now, started_after=crit is Criterion.STARTED_AFTER
        )
        return decide(
            facts,
            propagate_failures_forward=propagate_failures_forward,
            always_wait_when_syncing=always_wait_when_syncing,
            criterion=crit,
            wait_when_paused=wait_when_paused,
        )

    async def facts(
        self, connector_id: str, target_ms: int, now: int | None = None, started_after: bool = False
    ) -> Facts:
        """Fetch what decide() needs for ``target_ms``: one round trip, O(log n) reads."""
        pipe = self.client.pipeline(transaction=False)
        facts_commands(
            pipe,
            self.keys(connector_id),
            target_ms,
            running_from(now, self.max_sync_duration_ms),
            started_after,
        )
        return facts_from_results(await pipe.execute(), target_ms)
