"""The trigger behind ``FivetranDateTimeSensor(deferrable=True)``.

It decides exactly as the sensor's poke does (the same ``decide`` over the same
history), with async Redis only. It wakes when the webhook server publishes a change
for the connector and also re-checks every ``recheck_interval`` seconds, so a lost
publish delays the decision by at most one interval. All triggers of the triggerer
share one subscription and one small pool (``_wakeups.Hub``), so thousands of deferred
sensors cost one socket for wake-ups and a handful for reads.

An unreachable Redis is retried with backoff for ``retry_timeout`` seconds per check
(``hooks.aread_retrying``, the same policy as a poke), then reported in an event with
status ``unavailable`` that the sensor's ``execute_complete`` raises as a poke would;
with ``retry_timeout=None`` (a ``silent_fail`` sensor) it retries until the deferral
times out. It is never swallowed: a trigger that kept retrying forever would hold a
task deferred with nothing in its log but the triggerer's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from fivetran_events import Criterion, Decision, Outcome

from ._wakeups import hub_for
from .compat import BaseTrigger, TriggerEvent
from .exceptions import FivetranHistoryUnavailable
from .hooks import (
    DEFAULT_CONN_ID,
    DEFAULT_REDIS_RETRY_TIMEOUT,
    FivetranEventsRedisHook,
    aread_retrying,
    async_reader,
)

#: Default seconds between re-checks when no change message arrives.
DEFAULT_RECHECK_INTERVAL = 60.0
#: The event status that reports an outage (the others are decision outcomes).
UNAVAILABLE = "unavailable"


class FivetranSyncTrigger(BaseTrigger):
    """Fire once the connector's history decides SUCCESS or FAIL for the target."""

    def __init__(
        self,
        connector_id: str,
        target_ms: int,
        *,
        propagate_failures_forward: bool = True,
        always_wait_when_syncing: bool = False,
        criterion: str = Criterion.ENDED_AFTER.value,
        redis_conn_id: str = DEFAULT_CONN_ID,
        recheck_interval: float = DEFAULT_RECHECK_INTERVAL,
        retry_timeout: float | None = DEFAULT_REDIS_RETRY_TIMEOUT,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # BaseTrigger.__init__ is untyped
        self.connector_id = connector_id
        self.target_ms = int(target_ms)
        self.propagate_failures_forward = propagate_failures_forward
        self.always_wait_when_syncing = always_wait_when_syncing
        self.criterion = Criterion(criterion).value
        self.redis_conn_id = redis_conn_id
        self.recheck_interval = float(recheck_interval)
        self.retry_timeout = None if retry_timeout is None else float(retry_timeout)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_plugin.triggers.FivetranSyncTrigger",
            {
                "connector_id": self.connector_id,
                "target_ms": self.target_ms,
                "propagate_failures_forward": self.propagate_failures_forward,
                "always_wait_when_syncing": self.always_wait_when_syncing,
                "criterion": self.criterion,
                "redis_conn_id": self.redis_conn_id,
                "recheck_interval": self.recheck_interval,
                "retry_timeout": self.retry_timeout,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            decision = await self._until_decided()
        except FivetranHistoryUnavailable as exc:
            self.log.error("%s", exc)
            yield TriggerEvent(
                {"status": UNAVAILABLE, "message": str(exc), "target_ms": self.target_ms}
            )
            return
        yield TriggerEvent(
            {
                "status": decision.outcome.value,
                "message": decision.reason,
                "decision": decision.to_dict(),
            }
        )

    async def _until_decided(self) -> Decision:
        cfg = await FivetranEventsRedisHook(self.redis_conn_id).aconfig()
        hub = hub_for(cfg.url, cfg.key_prefix, cfg.to_redis_kwargs())
        changed = hub.register(self.connector_id)
        try:
            await hub.subscribed(timeout=min(5.0, self.recheck_interval))
            reader = async_reader(cfg, hub.client)
            woken_by = "the first check"
            while True:
                # Clear before reading: a change landing during the read sets it again,
                # so the wait below returns at once instead of missing it.
                changed.clear()
                decision = await aread_retrying(
                    lambda: reader.decide(
                        self.connector_id,
                        self.target_ms,
                        criterion=self.criterion,
                        propagate_failures_forward=self.propagate_failures_forward,
                        always_wait_when_syncing=self.always_wait_when_syncing,
                    ),
                    what=f"the history of connector {self.connector_id}",
                    cfg=cfg,
                    conn_id=self.redis_conn_id,
                    timeout=self.retry_timeout,
                )
                if decision.outcome is not Outcome.WAIT:
                    self.log.info(
                        "connector %s decided %s on %s: %s",
                        self.connector_id,
                        decision.outcome.value,
                        woken_by,
                        decision.reason,
                    )
                    return decision
                self.log.debug("connector %s: %s", self.connector_id, decision.reason)
                try:
                    await asyncio.wait_for(changed.wait(), self.recheck_interval)
                    woken_by = "a change message"
                except asyncio.TimeoutError:
                    woken_by = "the periodic re-check"
        finally:
            await hub.unregister(self.connector_id, changed)
