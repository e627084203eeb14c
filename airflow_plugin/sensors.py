"""``FivetranDateTimeSensor``: wait until a connector is synced as of the run's target.

It answers from the recorded history (no Fivetran API calls) with the one decision
function, in ``poke``, ``reschedule`` and deferrable modes alike, every flag honoured.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from fivetran_events import Decision, Outcome, parse_criterion
from fivetran_events.decision import FLAGS
from fivetran_events.timeutil import iso, now_ms, to_ms

from .compat import (
    AirflowSkipException,
    BaseSensorOperator,
    Context,
    PokeReturnValue,
    default_deferrable,
)
from .exceptions import FivetranHistoryUnavailable, FivetranSyncFailed
from .hooks import (
    DEFAULT_CONN_ID,
    DEFAULT_REDIS_RETRY_TIMEOUT,
    FivetranEventsRedisHook,
)
from .targets import resolve_target
from .triggers.decision import (
    DEFAULT_MIN_DEFERRAL,
    DEFAULT_RECHECK_INTERVAL,
    UNAVAILABLE,
    FivetranSyncDecisionTrigger,
)
from .ui import FivetranConnectorLink

#: Below this, reschedule mode meets an Airflow 3.2-3.3 scheduler race that fails the
#: sensor whatever it decided (apache/airflow#71172); the sensor warns at parse time.
MIN_RESCHEDULE_POKE_INTERVAL = 15.0


class FivetranDateTimeSensor(BaseSensorOperator):
    """Succeed once ``connector_id`` has synced as of the run's target time (docs/sensor.md).

    :param connector_name: instead of ``connector_id``, resolved from the recorded
        connectors when the task runs, with ``destination_name`` (the group id Fivetran's
        webhooks carry) when several share it.
    :param target_time: datetime or ISO 8601 text (naive is UTC); default: the run's
        ``data_interval_end``.
    :param redis_retry_timeout: seconds a check retries an unreachable Redis before it
        raises ``FivetranHistoryUnavailable``.
    :param min_deferral: deferred, resume no sooner than this after deferring: Airflow
        3.2 and later can fail a task resumed before its scheduler read the exit on ``defer()``.

    Returns (XCom) the deciding sync with the target; a FAIL raises ``FivetranSyncFailed``.
    While the latest end is RESCHEDULED, the next look is at Fivetran's ``rescheduledAt``.
    """

    template_fields: Sequence[str] = (
        "connector_id",
        "target_time",
        "connector_name",
        "destination_name",
    )
    ui_color = "#e3f4fc"
    operator_extra_links = (FivetranConnectorLink(),)

    def __init__(
        self,
        *,
        connector_id: str | None = None,
        connector_name: str | None = None,
        destination_name: str | None = None,
        target_time: datetime | str | None = None,
        propagate_failures_forward: bool = True,
        always_wait_when_syncing: bool = False,
        wait_when_paused: bool = False,
        wait_when_broken: bool = False,
        fail_when_overdue_after: float | None = None,
        criterion: str = "ended_after",
        redis_conn_id: str = DEFAULT_CONN_ID,
        deferrable: bool | None = None,
        recheck_interval: float = DEFAULT_RECHECK_INTERVAL,
        redis_retry_timeout: float = DEFAULT_REDIS_RETRY_TIMEOUT,
        min_deferral: float = DEFAULT_MIN_DEFERRAL,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (connector_id is None) == (connector_name is None):
            raise ValueError(f"{self.task_id}: give connector_id or connector_name (one of them)")
        if destination_name is not None and connector_name is None:
            raise ValueError(f"{self.task_id}: destination_name goes with connector_name")
        # "" until a connector_name is resolved (execute), so the type stays str.
        self.connector_id: str = connector_id or ""
        self.connector_name = connector_name
        self.destination_name = destination_name
        self.target_time = target_time
        self.propagate_failures_forward = propagate_failures_forward
        self.always_wait_when_syncing = always_wait_when_syncing
        self.wait_when_paused = wait_when_paused
        self.wait_when_broken = wait_when_broken
        self.fail_when_overdue_after = fail_when_overdue_after
        #: Fivetran's rescheduledAt of the last WAIT, when it gave one (epoch ms).
        self._recheck_at_ms: int | None = None
        self.criterion = parse_criterion(criterion).value
        self.redis_conn_id = redis_conn_id
        self.deferrable = default_deferrable() if deferrable is None else deferrable
        self.recheck_interval = recheck_interval
        self.redis_retry_timeout = float(redis_retry_timeout)
        if min_deferral < 0:
            raise ValueError(f"{self.task_id}: min_deferral must be >= 0 seconds")
        self.min_deferral = float(min_deferral)
        if (
            self.mode == "reschedule"
            and not self.deferrable
            and self.poke_interval < MIN_RESCHEDULE_POKE_INTERVAL
        ):
            warnings.warn(
                f"{self.task_id}: reschedule mode with poke_interval={self.poke_interval:g}s "
                f"can be failed by Airflow's scheduler when it reads a poke's result after "
                f"queueing the next (apache/airflow#71172); use poke_interval >= "
                f"{MIN_RESCHEDULE_POKE_INTERVAL:g}, poke mode or deferrable=True",
                UserWarning,
                stacklevel=2,
            )

    @cached_property
    def hook(self) -> FivetranEventsRedisHook:
        return FivetranEventsRedisHook(self.redis_conn_id)

    def _resolve_connector(self) -> None:
        """Turn ``connector_name`` into ``connector_id`` (again in a resumed process)."""
        if self.connector_name is None or self.connector_id:
            return
        self.connector_id = self.hook.connector_id_for(
            self.connector_name, self.destination_name, timeout=self.redis_retry_timeout
        )
        self.log.info("connector name %r is connector %s", self.connector_name, self.connector_id)

    def _target_ms(self, context: Context) -> int:
        target, source = resolve_target(self.target_time, context)
        self.log.info("connector %s: target %s (from %s)", self.connector_id, iso(target), source)
        return to_ms(target)

    def _flags(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FLAGS}

    def _decide(self, target_ms: int) -> Decision:
        return self.hook.read_retrying(
            lambda r: r.decide(
                self.connector_id,
                target_ms,
                fail_when_overdue_after=self.fail_when_overdue_after,
                **self._flags(),
            ),
            f"the history of connector {self.connector_id}",
            self.redis_retry_timeout,
        )

    def _outcome(self, decision: Decision) -> dict[str, Any] | None:
        """Return the XCom value on SUCCESS, raise on FAIL, log and return None on WAIT."""
        target = iso(decision.target_ms)
        if decision.outcome is Outcome.SUCCESS:
            self.log.info("connector %s: %s", self.connector_id, decision.reason)
            return {
                **(decision.sync.to_dict() if decision.sync is not None else {}),
                "connector_id": self.connector_id,
                "target": target,
            }
        if decision.outcome is Outcome.FAIL:
            message = (
                f"Fivetran connector {self.connector_id} is not synced "
                f"as of {target}: {decision.reason}"
            )
            if getattr(self, "never_fail", False):
                raise AirflowSkipException(f"{message} (skipped: never_fail is set)")
            # soft_fail skips a sensor that timed out; a FAIL is an answer, and Airflow's
            # poke loop lets it fail. Its resume path (after a deferral) would skip any
            # AirflowException under soft_fail: turn that off so every mode agrees.
            self.soft_fail = False
            raise FivetranSyncFailed(message)
        self.log.info("connector %s: waiting: %s", self.connector_id, decision.reason)
        self._recheck_at_ms = decision.recheck_at_ms
        return None

    def _get_next_poke_interval(self, started_at: Any, run_duration: Any, poke_count: int) -> float:
        """Wait until a ``rescheduledAt`` ahead (not past the timeout), else as Airflow does."""
        due = self._recheck_at_ms
        if due is not None:
            until = (due - now_ms()) / 1000
            if until > 0:
                left = max(float(self.timeout) - float(run_duration()), 0.0)
                self.log.info(
                    "connector %s: next look at %s (rescheduledAt)", self.connector_id, iso(due)
                )
                return min(until, left + 1.0)
        return float(super()._get_next_poke_interval(started_at, run_duration, poke_count))

    def _unavailable(self, exc: FivetranHistoryUnavailable, *, may_wait: bool) -> None:
        """Treat an outage as ``BaseSensorOperator.execute`` treats an error in ``poke``
        (the deferrable path never runs that): skip, wait on (return) or raise."""

        if getattr(self, "never_fail", False):
            raise AirflowSkipException(f"Skipping due to never_fail: {exc}") from exc
        if may_wait and self._silent_on_outage():
            self.log.error("connector %s: %s; silent_fail: waiting on", self.connector_id, exc)
            return
        raise exc

    def _silent_on_outage(self) -> bool:
        return bool(getattr(self, "_outage_silent", getattr(self, "silent_fail", False)))

    def poke(self, context: Context) -> PokeReturnValue:
        self._recheck_at_ms = None
        try:
            decision = self._decide(self._target_ms(context))
        except FivetranHistoryUnavailable as exc:
            self._unavailable(exc, may_wait=True)  # returns under silent_fail: poke again
            return PokeReturnValue(is_done=False)
        result = self._outcome(decision)
        return PokeReturnValue(is_done=result is not None, xcom_value=result)

    def execute(self, context: Context) -> Any:
        self._resolve_connector()
        if not self.deferrable:
            # silent_fail keeps a sensor waiting through errors, not through a FAIL
            # decision: poke applies it to outages itself, and Airflow's loop, which
            # would swallow FivetranSyncFailed too, runs without it.
            self._outage_silent, self.silent_fail = self.silent_fail, False
            try:
                return super().execute(context)
            finally:
                self.silent_fail = self._outage_silent
                del self._outage_silent
        target_ms = self._target_ms(context)
        try:
            decision = self._decide(target_ms)
        except FivetranHistoryUnavailable as exc:
            self._unavailable(exc, may_wait=True)  # returns under silent_fail: defer
        else:
            result = self._outcome(decision)
            if result is not None:
                return result
        self._defer(target_ms)
        return None

    def _defer(self, target_ms: int) -> None:
        # Under silent_fail the trigger retries an unreachable Redis without end, as
        # poke mode keeps poking: the deferral's timeout (the sensor's) ends the wait.
        silent = bool(getattr(self, "silent_fail", False))
        self.defer(
            trigger=FivetranSyncDecisionTrigger(
                connector_id=self.connector_id,
                target_ms=target_ms,
                **self._flags(),
                fail_when_overdue_after=self.fail_when_overdue_after,
                redis_conn_id=self.redis_conn_id,
                recheck_interval=self.recheck_interval,
                retry_timeout=None if silent else self.redis_retry_timeout,
                deferred_ms=now_ms(),
                min_deferral=self.min_deferral,
            ),
            method_name="execute_complete",
            # The sensor's own timeout (not execution_timeout) bounds the deferred wait.
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Finish on the trigger's event; a FAIL or an outage raises here, on the task."""
        if event and event.get("status") == UNAVAILABLE:
            # Under silent_fail the trigger never reports an outage (it retries until the
            # deferral times out), so here there is nothing left to wait for.
            self._unavailable(FivetranHistoryUnavailable(event.get("message", "")), may_wait=False)
        self._resolve_connector()
        if not event or "decision" not in event:
            raise FivetranSyncFailed(f"trigger ended without a decision: {event!r}")
        return self._outcome(Decision.from_dict(event["decision"]))
