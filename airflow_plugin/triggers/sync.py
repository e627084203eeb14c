"""The wait of ``FivetranSyncOperator``: a sync request answered from the history.

It fires on SUCCESS, FAIL or ASK_AGAIN (``fivetran_events.sync_request.answer``). After
``fallback_after`` seconds with nothing of the request recorded it also reads Fivetran's
API every ``poll_frequency`` seconds, so a broken webhook degrades to polling.

Deferred, the answer is held until ``min_deferral`` seconds after the task deferred, as
the sensor's is (``triggers.decision``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fivetran_events import AsyncHistoryReader, Criterion, Decision, Outcome
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.freshness import Freshness
from fivetran_events.settings import history_defaults
from fivetran_events.sync_request import Answer, Step, answer, answer_from_connection
from fivetran_events.timeutil import iso, now_ms

from ..compat import TriggerEvent
from ..exceptions import FivetranHistoryUnavailable
from ..hooks import (
    DEFAULT_CONN_ID,
    DEFAULT_FIVETRAN_CONN_ID,
    DEFAULT_REDIS_RETRY_TIMEOUT,
    FivetranApiHook,
    FivetranEventsRedisHook,
    HistoryConfig,
    aread_retrying,
)
from ._wakeups import changed_within, hub_for, stop_if_cancelled
from .decision import (
    DEFAULT_MIN_DEFERRAL,
    DEFAULT_RECHECK_INTERVAL,
    UNAVAILABLE,
    FivetranSyncDecisionTrigger,
)

#: Seconds without a record of the request before Fivetran's API is read instead.
DEFAULT_FALLBACK_AFTER = 600.0
#: Seconds between two reads of Fivetran's API on the fallback (astronomer's default).
DEFAULT_POLL_FREQUENCY = 15.0


class FivetranSyncRequestTrigger(FivetranSyncDecisionTrigger):
    """Fire once the request made at ``target_ms`` is answered, or must be made again.

    ``force``: the request's sync follows one running when it asked. ``conflict``: the
    request was refused (a resync's 409); echoed so the operator asks only once more.
    """

    def __init__(
        self,
        connector_id: str,
        target_ms: int,
        *,
        force: bool = False,
        running_at_ask: bool = False,
        fallback_after: float | None = DEFAULT_FALLBACK_AFTER,
        poll_frequency: float = DEFAULT_POLL_FREQUENCY,
        reschedule_wait_time: float | None = None,
        fivetran_conn_id: str = DEFAULT_FIVETRAN_CONN_ID,
        redis_conn_id: str = DEFAULT_CONN_ID,
        recheck_interval: float = DEFAULT_RECHECK_INTERVAL,
        retry_timeout: float | None = DEFAULT_REDIS_RETRY_TIMEOUT,
        deferred_ms: int | None = None,
        min_deferral: float = DEFAULT_MIN_DEFERRAL,
        conflict: bool = False,
        wait_when_broken: bool = False,
        fail_when_overdue_after: float | None = None,
    ) -> None:
        super().__init__(
            connector_id,
            target_ms,
            propagate_failures_forward=False,
            wait_when_broken=wait_when_broken,
            fail_when_overdue_after=fail_when_overdue_after,
            criterion=Criterion.STARTED_AFTER.value,
            redis_conn_id=redis_conn_id,
            recheck_interval=recheck_interval,
            retry_timeout=retry_timeout,
            deferred_ms=deferred_ms,
            min_deferral=min_deferral,
        )
        self.force = force
        self.running_at_ask = running_at_ask
        self.fallback_after = None if fallback_after is None else float(fallback_after)
        self.poll_frequency = float(poll_frequency)
        self.reschedule_wait_time = (
            None if reschedule_wait_time is None else float(reschedule_wait_time)
        )
        self.fivetran_conn_id = fivetran_conn_id
        self.conflict = conflict

    def serialize(self) -> tuple[str, dict[str, Any]]:
        names: tuple[str, ...] = ("connector_id", "target_ms", "force", "running_at_ask")
        names += ("fallback_after", "poll_frequency", "reschedule_wait_time", "fivetran_conn_id")
        names += ("redis_conn_id", "recheck_interval", "retry_timeout", "deferred_ms")
        names += ("min_deferral", "conflict", "wait_when_broken", "fail_when_overdue_after")
        return (
            "airflow_plugin.triggers.sync.FivetranSyncRequestTrigger",
            {n: getattr(self, n) for n in names},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deferred_ms = now_ms() if self.deferred_ms is None else self.deferred_ms
        cfg = await FivetranEventsRedisHook(self.redis_conn_id).aconfig()

        event = await self.wait(cfg, FivetranApiHook(self.fivetran_conn_id).aget_conn)
        await self._hold(deferred_ms)
        yield TriggerEvent(event)

    async def wait(self, cfg: HistoryConfig, client: Callable[[], Any]) -> dict[str, Any]:
        """Return the answer's event payload; ``client()`` makes the API client (or awaits it)."""
        try:
            return await self._until_answered(cfg, client)
        except FivetranHistoryUnavailable as exc:
            self.log.error("%s", exc)
            return {"status": UNAVAILABLE, "message": str(exc), "fired_at": time.time()}

    async def _until_answered(
        self, cfg: HistoryConfig, client: Callable[[], Any]
    ) -> dict[str, Any]:
        hub = hub_for(cfg.url, cfg.key_prefix, cfg.to_redis_kwargs())
        changed = hub.register(self.connector_id)
        target = self.target_ms
        api: FivetranClient | None = None
        try:
            await hub.subscribed(timeout=min(5.0, self.recheck_interval))
            fresh = Freshness.from_settings(history_defaults())
            reader = AsyncHistoryReader(hub.client, cfg.key_prefix, cfg.max_sync_duration_ms, fresh)
            logged_wait = False
            while True:
                stop_if_cancelled()
                changed.clear()
                facts = await aread_retrying(
                    lambda t=target: reader.facts(self.connector_id, t, started_after=True),  # type: ignore[misc]
                    what=f"the history of connector {self.connector_id}",
                    cfg=cfg,
                    conn_id=self.redis_conn_id,
                    timeout=self.retry_timeout,
                )
                stop_if_cancelled()
                got = answer(
                    facts,
                    force=self.force,
                    now_ms=now_ms(),
                    asked_ms=self.target_ms,
                    fallback_after_ms=_ms(self.fallback_after),
                    reschedule_wait_ms=_ms(self.reschedule_wait_time),
                    wait_when_broken=self.wait_when_broken,
                )
                if got.step is Step.WAIT:
                    late = reader.overdue(
                        self.connector_id, facts, got.decision, self.fail_when_overdue_after, None
                    )
                    if late.outcome is Outcome.FAIL:
                        self.log.info("connector %s: fail: %s", self.connector_id, late.reason)
                        return self._payload(Step.FAIL, late.reason, late, reconciled=False)
                if got.retarget_ms is not None and got.retarget_ms != target:
                    self.log.info("connector %s: %s", self.connector_id, got.reason)
                    target = got.retarget_ms
                    continue
                if got.step in (Step.SUCCESS, Step.FAIL, Step.ASK_AGAIN):
                    self.log.info(
                        "connector %s: %s: %s", self.connector_id, got.step.value, got.reason
                    )
                    return self._payload(got.step, got.reason, got.decision, reconciled=False)
                if got.step is Step.FALL_BACK:
                    if api is None:
                        self.log.warning("connector %s: %s", self.connector_id, got.reason)
                        made = client()
                        api = await made if asyncio.iscoroutine(made) else made
                    found = await self._read_connection(api)
                    if found is not None:
                        return found
                    pause = self.poll_frequency
                else:
                    if not logged_wait:
                        self.log.info("connector %s waits: %s", self.connector_id, got.reason)
                        logged_wait = True
                    pause = self._pause_for(got)
                await changed_within(changed, pause)
        finally:
            await hub.unregister(self.connector_id, changed)
            if api is not None:
                api.close()

    def _pause_for(self, got: Answer) -> float:
        """Return the seconds to the next look: ``_pause``, or sooner the fallback's due time."""
        pause, _ = self._pause(got.decision)
        if self.fallback_after is not None:
            # Only ahead of it: once due and not taken (a sync of the request was seen),
            # the re-check interval applies again, not a busy loop.
            due = (self.target_ms + self.fallback_after * 1000 - now_ms()) / 1000
            if due > 0:
                pause = min(pause, due)
        return pause

    async def _read_connection(self, api: FivetranClient) -> dict[str, Any] | None:
        """Read the connection once (the fallback); return the payload when it answers."""
        conn = await asyncio.to_thread(api.connection, self.connector_id)
        step, reason, completion = answer_from_connection(
            asked_ms=self.target_ms,
            succeeded_at=conn.succeeded_at,
            failed_at=conn.failed_at,
            syncing=conn.sync_state == "syncing",
            paused=conn.paused,
            running_at_ask=self.running_at_ask,
            force=self.force,
            connector_id=self.connector_id,
            rescheduled=conn.sync_state == "rescheduled" and conn.schedule_type == "manual",
            rescheduled_for=conn.rescheduled_for,
            reschedule_wait_ms=_ms(self.reschedule_wait_time),
            now_ms=now_ms(),
        )
        if step is Step.WAIT:
            self.log.debug("connector %s (from Fivetran's API): %s", self.connector_id, reason)
            return None
        self.log.warning("connector %s, from Fivetran's API: %s", self.connector_id, reason)
        outcome = {Step.SUCCESS: Outcome.SUCCESS, Step.FAIL: Outcome.FAIL}.get(step, Outcome.WAIT)
        decision = Decision(outcome, reason, self.target_ms, completion)
        return self._payload(step, reason, decision, reconciled=completion is not None)

    def _payload(
        self, step: Step, reason: str, decision: Decision, *, reconciled: bool
    ) -> dict[str, Any]:
        return {
            "status": step.value,
            "connector_id": self.connector_id,
            "message": reason,
            "decision": decision.to_dict(),
            "asked_at": iso(self.target_ms),
            "reconciled": reconciled,
            "conflict": self.conflict,
            # When the trigger fired (epoch s): times the wake-up itself (bench/sync.py).
            "fired_at": time.time(),
        }


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)
