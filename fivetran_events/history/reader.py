"""The history reader: the sensor's questions, each O(log n), and the one decision.

``decide`` is the entry point every caller uses (the read API, the CLI, the sensor, the
short-circuit operator; the trigger uses the async twin in ``async_reader.py``): it
fetches the facts the criterion needs and applies ``fivetran_events.decision.decide``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import redis

from ..decision import Criterion, Decision, Facts, RunningSync, decide
from ..keys import ConnectorKeys, connectors_key
from . import listings
from .queries import (
    facts_commands,
    facts_from_results,
    running_from,
    running_sync,
    target_and_criterion,
)


class HistoryReader:
    """Answer the sensor's questions in O(log n) per question."""

    def __init__(self, client: redis.Redis, prefix: str, max_sync_duration_ms: int) -> None:
        self.client = client
        self.prefix = prefix
        self.max_sync_duration_ms = max_sync_duration_ms

    def keys(self, connector_id: str) -> ConnectorKeys:
        return ConnectorKeys(self.prefix, connector_id)

    def running_from(self, now: int | None) -> int:
        return running_from(now, self.max_sync_duration_ms)

    def decide(
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
        """Decide SUCCESS, FAIL or WAIT for ``connector_id`` at ``target`` (one round trip).

        Raises ValueError naming the valid criteria for an unknown ``criterion``.
        """
        target_ms, crit = target_and_criterion(target, criterion)
        facts = self.facts(
            connector_id, target_ms, now=now, started_after=crit is Criterion.STARTED_AFTER
        )
        return decide(
            facts,
            propagate_failures_forward=propagate_failures_forward,
            always_wait_when_syncing=always_wait_when_syncing,
            criterion=crit,
            wait_when_paused=wait_when_paused,
        )

    def facts(
        self, connector_id: str, target_ms: int, now: int | None = None, started_after: bool = False
    ) -> Facts:
        """Fetch what decide() needs for ``target_ms``: one round trip, O(log n) reads."""
        pipe = self.client.pipeline(transaction=False)
        facts_commands(
            pipe, self.keys(connector_id), target_ms, self.running_from(now), started_after
        )
        return facts_from_results(pipe.execute(), target_ms)

    def running(self, connector_id: str, now: int | None = None) -> RunningSync | None:
        """Return the newest running sync that is not stale, if any."""
        rows: Any = self.client.zrevrangebyscore(
            self.keys(connector_id).running,
            "+inf",
            self.running_from(now),
            start=0,
            num=1,
            withscores=True,
        )
        return running_sync(rows)

    def start_of(self, connector_id: str, sync_id: str) -> int | None:
        """Return the first recorded start (ms) of ``sync_id``, if any was recorded.

        A retried sync has several; each completion carries its own attempt's start.
        Starts are short-lived (``writer.RECENT_MS`` behind the connector's newest event:
        they matter while a late ``sync_end`` may still arrive); a completion's own
        ``started_ms`` is what lasts.
        """
        score = self.client.zscore(self.keys(connector_id).starts, sync_id)
        return None if score is None else int(score)

    def known(self, connector_id: str) -> bool:
        """Return whether any event of ``connector_id`` was recorded."""
        return bool(self.client.hexists(connectors_key(self.prefix), connector_id))

    # The listings are shaped for the read API and the CLI (listings.py); these two
    # names stay for their callers.
    def syncs(
        self,
        connector_id: str,
        since_ms: int | None = None,
        until_ms: int | None = None,
        limit: int = 100,
        now: int | None = None,
    ) -> list[dict[str, Any]]:
        """List the connector's syncs, newest first (``listings.syncs``)."""
        return listings.syncs(
            self.client,
            self.prefix,
            connector_id,
            self.running_from(now),
            since_ms,
            until_ms,
            limit,
        )

    def connectors(self, now: int | None = None) -> list[dict[str, Any]]:
        """List known connectors with their latest syncs (``listings.connectors``)."""
        return listings.connectors(self.client, self.prefix, self.running_from(now))
