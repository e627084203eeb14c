"""Knowing that a decision trigger is waiting, for tests that must record after that.

A trigger that is not yet decided calls ``_pause`` once its read is done and before it
waits: from then on a sync recorded reaches it as a change message (or a re-check),
never as its first read, which is what a wake-up test must be sure of before it records
one. ``FirstWaits`` wraps that method (the trigger's behaviour is unchanged) and counts
each trigger's first call, by connector.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any


class FirstWaits:
    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._triggers: set[int] = set()

    def install(self, monkeypatch: Any) -> None:
        """Wrap ``FivetranSyncDecisionTrigger._pause`` for the test's length."""
        from airflow_plugin.triggers.decision import FivetranSyncDecisionTrigger

        original = FivetranSyncDecisionTrigger._pause

        def _pause(trigger: Any, decision: Any) -> tuple[float, str]:
            if id(trigger) not in self._triggers:
                self._triggers.add(id(trigger))
                self.seen[trigger.connector_id] += 1
            return original(trigger, decision)

        monkeypatch.setattr(FivetranSyncDecisionTrigger, "_pause", _pause)

    async def of(self, connector: str, count: int = 1, timeout: float = 30.0) -> None:
        """Return once ``count`` triggers of ``connector`` are waiting."""
        await self._until(lambda: self.seen[connector] >= count, f"{count} of {connector}", timeout)

    async def total(self, count: int, timeout: float = 60.0) -> None:
        """Return once ``count`` triggers in all are waiting."""
        await self._until(lambda: sum(self.seen.values()) >= count, f"{count} triggers", timeout)

    async def _until(self, done: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} never waited: {dict(self.seen)}")
            await asyncio.sleep(0.01)
