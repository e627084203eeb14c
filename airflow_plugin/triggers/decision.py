"""The trigger behind ``FivetranDateTimeSensor(deferrable=True)``.

It decides as the sensor's poke does, with async Redis only, woken by the connector's
change message and re-checking every ``recheck_interval`` seconds. An outage is reported
in an ``unavailable`` event that ``execute_complete`` raises, so it shows on the task.

Given ``deferred_ms``, an event is held until ``min_deferral`` seconds after the task
deferred: from 3.2 on (still in 3.4) Airflow's scheduler fails a task resumed before it has
read the executor's report of the task's exit on ``defer()`` (apache/airflow#67287,
#72716, #71580), and that report lags by up to the supervisor's ``[workers]
min_heartbeat_interval`` (5 s) and more on a loaded scheduler.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator
from typing import Any

from fivetran_events import AsyncHistoryReader, Criterion, Decision, Outcome
from fivetran_events.decision import FLAGS
from fivetran_events.freshness import Freshness
from fivetran_events.settings import history_defaults
from fivetran_events.timeutil import now_ms

from ..compat import AIRFLOW_VERSION_INFO, BaseTrigger, TriggerEvent
from ..exceptions import FivetranHistoryUnavailable
from ..hooks import (
    DEFAULT_CONN_ID,
    DEFAULT_REDIS_RETRY_TIMEOUT,
    FivetranEventsRedisHook,
    aread_retrying,
)
from ._wakeups import changed_within, hub_for, stop_if_cancelled

#: Seconds between re-checks without a change message: a last resort, as the hub wakes
#: every trigger when it subscribes again (its cost at scale: docs/sensor.md).
DEFAULT_RECHECK_INTERVAL = 300.0
#: Each wait is drawn from [1 - this, 1] x ``recheck_interval``, so triggers woken
#: together drift apart instead of re-checking in one burst every interval.
RECHECK_JITTER = 0.25
#: The event status that reports an outage (the others are decision outcomes).
UNAVAILABLE = "unavailable"
#: Seconds after deferring before a deferred task is answered: the one version check of it.
DEFAULT_MIN_DEFERRAL = 10.0 if AIRFLOW_VERSION_INFO >= (3, 2) else 0.0


class FivetranSyncDecisionTrigger(BaseTrigger):
    """Fire once the history decides SUCCESS or FAIL for the target: the sensor's deferral."""

    def __init__(
        self,
        connector_id: str,
        target_ms: int,
        *,
        propagate_failures_forward: bool = True,
        always_wait_when_syncing: bool = False,
        wait_when_paused: bool = False,
        wait_when_broken: bool = False,
        fail_when_overdue_after: float | None = None,
        criterion: str = Criterion.ENDED_AFTER.value,
        redis_conn_id: str = DEFAULT_CONN_ID,
        recheck_interval: float = DEFAULT_RECHECK_INTERVAL,
        retry_timeout: float | None = DEFAULT_REDIS_RETRY_TIMEOUT,
        deferred_ms: int | None = None,
        min_deferral: float = 0.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # BaseTrigger.__init__ is untyped
        self.connector_id = connector_id
        self.target_ms = int(target_ms)
        self.propagate_failures_forward = propagate_failures_forward
        self.always_wait_when_syncing = always_wait_when_syncing
        self.wait_when_paused = wait_when_paused
        self.wait_when_broken = wait_when_broken
        self.fail_when_overdue_after = fail_when_overdue_after
        self.criterion = Criterion(criterion).value
        self.redis_conn_id = redis_conn_id
        self.recheck_interval = float(recheck_interval)
        self.retry_timeout = None if retry_timeout is None else float(retry_timeout)
        # When the task deferred (epoch ms; None: when run() starts) and the hold after it.
        self.deferred_ms = deferred_ms
        self.min_deferral = float(min_deferral)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        names: tuple[str, ...] = ("connector_id", "target_ms", *FLAGS, "fail_when_overdue_after")
        names += ("redis_conn_id", "recheck_interval", "retry_timeout", "deferred_ms")
        names += ("min_deferral",)
        return (
            "airflow_plugin.triggers.decision.FivetranSyncDecisionTrigger",
            {n: getattr(self, n) for n in names},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deferred_ms = now_ms() if self.deferred_ms is None else self.deferred_ms
        try:
            decision = await self._until_decided()
        except FivetranHistoryUnavailable as exc:
            self.log.error("%s", exc)
            payload = {"status": UNAVAILABLE, "message": str(exc), "target_ms": self.target_ms}
        else:
            payload = {
                "status": decision.outcome.value,
                "message": decision.reason,
                "decision": decision.to_dict(),
            }
        await self._hold(deferred_ms)
        # Epoch s: the task resumes a scheduler loop or two later.
        yield TriggerEvent({**payload, "fired_at": time.time()})

    async def _hold(self, deferred_ms: int) -> None:
        """Sleep until ``min_deferral`` seconds after ``deferred_ms`` (see the module's text)."""
        hold = (deferred_ms + self.min_deferral * 1000 - now_ms()) / 1000
        if hold > 0:
            self.log.info(
                "connector %s: answered %.1f s after the task deferred; held %.1f s more so "
                "Airflow's scheduler reads the task's exit on defer() first (min_deferral)",
                self.connector_id,
                self.min_deferral - hold,
                hold,
            )
            await asyncio.sleep(hold)

    async def _until_decided(self) -> Decision:
        cfg = await FivetranEventsRedisHook(self.redis_conn_id).aconfig()
        hub = hub_for(cfg.url, cfg.key_prefix, cfg.to_redis_kwargs())
        changed = hub.register(self.connector_id)
        try:
            await hub.subscribed(timeout=min(5.0, self.recheck_interval))
            fresh = Freshness.from_settings(history_defaults())
            reader = AsyncHistoryReader(hub.client, cfg.key_prefix, cfg.max_sync_duration_ms, fresh)
            woken_by = "the first check"
            while True:
                stop_if_cancelled()
                # Clear before reading: a change landing during the read sets it again,
                # so the wait below returns at once instead of missing it.
                changed.clear()
                decision = await aread_retrying(
                    lambda: reader.decide(
                        self.connector_id,
                        self.target_ms,
                        fail_when_overdue_after=self.fail_when_overdue_after,
                        **{name: getattr(self, name) for name in FLAGS},
                    ),
                    what=f"the history of connector {self.connector_id}",
                    cfg=cfg,
                    conn_id=self.redis_conn_id,
                    timeout=self.retry_timeout,
                )
                stop_if_cancelled()
                if decision.outcome is not Outcome.WAIT:
                    self.log.info(
                        "connector %s decided %s on %s: %s",
                        self.connector_id,
                        decision.outcome.value,
                        woken_by,
                        decision.reason,
                    )
                    return decision
                # Only the first wait is worth a line in the task log (why it defers).
                level = logging.INFO if woken_by == "the first check" else logging.DEBUG
                self.log.log(level, "connector %s waits: %s", self.connector_id, decision.reason)
                pause, why = self._pause(decision)
                woken_by = "a change message" if await changed_within(changed, pause) else why
        finally:
            await hub.unregister(self.connector_id, changed)

    def _pause(self, decision: Decision) -> tuple[float, str]:
        """Return the seconds until the next look without a change message, and why."""
        due = decision.recheck_at_ms
        if due is not None:
            until = (due - now_ms()) / 1000
            if until > 0:
                return until, "the sync's rescheduledAt"
        jittered = self.recheck_interval * random.uniform(1.0 - RECHECK_JITTER, 1.0)  # noqa: S311
        return jittered, "the periodic re-check"
