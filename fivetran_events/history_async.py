"""The history reader over ``redis.asyncio``: the async twin of ``HistoryReader.facts``.

The Airflow trigger runs in the triggerer's event loop, where a blocking Redis call
would stall every other deferred task, so it reads through this class. The queries and
their decoding are the sync reader's own (``facts_commands``, ``facts_from_results``,
``attach_starts``); only the awaiting differs.
"""

from __future__ import annotations

from typing import Any

from .decision import Completion, Facts
from .history import (
    SUCCESS_PAGE,
    attach_starts,
    decode_completion,
    facts_commands,
    facts_from_results,
    more_successes_needed,
)
from .keys import ConnectorKeys
from .timeutil import now_ms


class AsyncHistoryReader:
    """Fetch ``Facts`` for the decision without blocking the event loop."""

    def __init__(self, client: Any, prefix: str, max_sync_duration_ms: int) -> None:
        self.client = client  # a redis.asyncio.Redis
        self.prefix = prefix
        self.max_sync_duration_ms = max_sync_duration_ms

    def keys(self, connector_id: str) -> ConnectorKeys:
        return ConnectorKeys(self.prefix, connector_id)

    async def facts(self, connector_id: str, target_ms: int, now: int | None = None,
                    started_after: bool = False) -> Facts:
        """Fetch what decide() needs for ``target_ms`` (two round trips, O(log n) each)."""
        keys = self.keys(connector_id)
        now = now_ms() if now is None else now
        pipe = self.client.pipeline(transaction=False)
        facts_commands(pipe, keys, target_ms, now - self.max_sync_duration_ms)
        results = await pipe.execute()
        successes = await self._with_starts(keys, [decode_completion(m, s)
                                                   for m, s in results[0]])
        # Same paging as HistoryReader.facts: only started_after needs more than one page.
        while more_successes_needed(successes, started_after, target_ms):
            rows = await self.client.zrangebyscore(keys.ok, target_ms, "+inf",
                                                   start=len(successes), num=SUCCESS_PAGE,
                                                   withscores=True)
            if not rows:
                break
            successes += await self._with_starts(keys, [decode_completion(m, s)
                                                        for m, s in rows])
        return facts_from_results(results, target_ms, successes)

    async def _with_starts(self, keys: ConnectorKeys,
                           page: list[Completion]) -> list[Completion]:
        if not page:
            return []
        starts = await self.client.zmscore(keys.starts, [c.sync_id for c in page])
        return attach_starts(page, starts)
