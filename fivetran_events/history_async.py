"""The history reader over ``redis.asyncio``: the async twin of ``HistoryReader.facts``.

The Airflow trigger runs in the triggerer's event loop, where a blocking Redis call
would stall every other deferred task, so it reads through this class. The queries and
their decoding are the sync reader's own (``facts_commands``, ``facts_from_results``):
one pipelined round trip of O(log n) reads whatever the criterion, so a decision never
holds the loop for longer than one short await.
"""

from __future__ import annotations

from typing import Any

from .decision import Facts
from .history import facts_commands, facts_from_results, running_from
from .keys import ConnectorKeys


class AsyncHistoryReader:
    """Fetch ``Facts`` for the decision without blocking the event loop."""

    def __init__(self, client: Any, prefix: str, max_sync_duration_ms: int) -> None:
        self.client = client  # a redis.asyncio.Redis
        self.prefix = prefix
        self.max_sync_duration_ms = max_sync_duration_ms

    def keys(self, connector_id: str) -> ConnectorKeys:
        return ConnectorKeys(self.prefix, connector_id)

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
