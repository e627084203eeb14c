"""Start a Fivetran sync and wait for it by the webhook's push, not by polling.

Arguments as astronomer's ``FivetranOperator`` (docs/triggering.md); Fivetran's API is
read only after ``fallback_after`` seconds without any record of the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from functools import cached_property
from typing import Any

from redis.exceptions import NoPermissionError

from fivetran_events import (
    Completion,
    Decision,
    Event,
    EventKind,
    HistoryWriter,
    Outcome,
    parse_criterion,
)
from fivetran_events.exceptions import FivetranRejected
from fivetran_events.fivetran_api import FivetranClient, resync_scope
from fivetran_events.model import SOURCE_RECONCILED
from fivetran_events.settings import Settings
from fivetran_events.sync_request import Step
from fivetran_events.timeutil import iso, now_ms, to_ms

from ..compat import BaseOperator, Context, ShortCircuitOperator, default_deferrable
from ..exceptions import ConnectorNameError, FivetranHistoryUnavailable, FivetranSyncFailed
from ..hooks import (
    DEFAULT_CONN_ID,
    DEFAULT_FIVETRAN_CONN_ID,
    DEFAULT_REDIS_RETRY_TIMEOUT,
    FivetranApiHook,
    FivetranEventsRedisHook,
)
from ..targets import resolve_target
from ..triggers.decision import DEFAULT_MIN_DEFERRAL, DEFAULT_RECHECK_INTERVAL, UNAVAILABLE
from ..triggers.sync import (
    DEFAULT_FALLBACK_AFTER,
    DEFAULT_POLL_FREQUENCY,
    FivetranSyncRequestTrigger,
)
from ..ui import FivetranConnectorLink

#: The server's default retention, for the reconciled sync this side records.
RETENTION_MS = int(Settings.model_fields["retention_days"].default * 86_400_000)


def _asks_again(event: Mapping[str, Any]) -> bool:
    """Whether a wait's event means: make the request again. After a refusal (``conflict``)
    any sync's success means only that the running one ended: the request is still due."""
    if event.get("conflict") and event.get("status") == Step.SUCCESS.value:
        return True
    return event.get("status") == Step.ASK_AGAIN.value


def _sync_needed(**context: Any) -> bool:
    op: FivetranSyncShortCircuitOperator = context["task"]
    return op.sync_needed(context)  # type: ignore[arg-type]


class FivetranSyncShortCircuitOperator(ShortCircuitOperator):
    """Continue downstream only if no success counts for the run's target (the sensor's args)."""

    template_fields = (*ShortCircuitOperator.template_fields, "connector_id", "target_time")

    def __init__(
        self,
        *,
        connector_id: str,
        target_time: datetime | str | None = None,
        criterion: str = "ended_after",
        redis_conn_id: str = DEFAULT_CONN_ID,
        redis_retry_timeout: float = DEFAULT_REDIS_RETRY_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        super().__init__(python_callable=_sync_needed, **kwargs)
        self.connector_id = connector_id
        self.target_time = target_time
        self.criterion = parse_criterion(criterion).value
        self.redis_conn_id = redis_conn_id
        self.redis_retry_timeout = float(redis_retry_timeout)

    def sync_needed(self, context: Context) -> bool:
        """Return False (skip downstream) when a success already counts for the target."""
        return already_synced(self, context) is None


def connector_id_in_fivetran(client: FivetranClient, name: str, destination_name: str) -> str:
    """Return the id of the connection whose schema is ``name`` in the destination group
    of that display name, as astronomer's hook finds it: two calls to Fivetran's API."""
    groups = [g for g in client.groups() if g.name == destination_name]
    if len(groups) != 1:
        raise ConnectorNameError(
            f"{len(groups) or 'no'} destination(s) named {destination_name!r} in Fivetran"
        )
    found = [c for c in client.connections(groups[0].id) if c.schema == name]
    if len(found) != 1:
        raise ConnectorNameError(
            f"{len(found) or 'no'} connection(s) named {name!r} in "
            f"destination {destination_name!r} ({groups[0].id})"
        )
    return found[0].id


def already_synced(op: Any, context: Context) -> Decision | None:
    """Return the SUCCESS that makes a sync needless for ``op``'s target, or None."""
    target, source = resolve_target(op.target_time, context)
    decision = FivetranEventsRedisHook(op.redis_conn_id).read_retrying(
        lambda r: r.decide(
            op.connector_id, to_ms(target), criterion=op.criterion, propagate_failures_forward=False
        ),
        f"the history of connector {op.connector_id}",
        op.redis_retry_timeout,
    )
    synced = decision.outcome is Outcome.SUCCESS
    op.log.info(
        "connector %s %s as of %s (%s): %s%s",
        op.connector_id,
        "is already synced" if synced else "needs a sync",
        iso(target),
        source,
        decision.reason,
        "; skipping the sync" if synced else "",
    )
    return decision if synced else None


class FivetranSyncOperator(BaseOperator):
    """Start a connector's sync; succeed when a sync started after the request succeeds.

    :param force: Fivetran's ``force``; without it a running sync ends, then it is asked again.
    :param fallback_after: seconds without a record before Fivetran's API is read every
        ``poll_frequency`` seconds (None: never).
    :param min_deferral: resume no sooner than this after deferring: Airflow 3.2 and later
        can fail a task resumed before its scheduler read the exit on ``defer()``.

    Returns (XCom) the answering sync with ``connector_id``, ``asked_at`` and
    ``reconciled`` (read from Fivetran's API); a failed sync raises ``FivetranSyncFailed``.
    """

    template_fields: Sequence[str] = ("connector_id", "connector_name", "destination_name")
    ui_color = "#c9e8f7"
    operator_extra_links = (FivetranConnectorLink(),)
    #: What is asked of Fivetran: ``sync`` or ``resync``.
    mode = "sync"

    def __init__(
        self,
        *,
        connector_id: str | None = None,
        connector_name: str | None = None,
        destination_name: str | None = None,
        fivetran_conn_id: str = DEFAULT_FIVETRAN_CONN_ID,
        force: bool = False,
        schedule_type: str | None = "manual",
        wait_for_completion: bool = True,
        deferrable: bool | None = True,
        poll_frequency: float = DEFAULT_POLL_FREQUENCY,
        fallback_after: float | None = DEFAULT_FALLBACK_AFTER,
        reschedule_wait_time: float | None = None,
        skip_if_synced_after_data_interval_end: bool = False,
        redis_conn_id: str = DEFAULT_CONN_ID,
        recheck_interval: float = DEFAULT_RECHECK_INTERVAL,
        redis_retry_timeout: float = DEFAULT_REDIS_RETRY_TIMEOUT,
        min_deferral: float = DEFAULT_MIN_DEFERRAL,
        wait_when_broken: bool = False,
        fail_when_overdue_after: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (connector_id is None) == (connector_name is None):
            raise ValueError(f"{self.task_id}: give connector_id or connector_name (one of them)")
        if (connector_name is None) != (destination_name is None):
            raise ValueError(f"{self.task_id}: connector_name goes with destination_name")
        if schedule_type not in (None, "manual", "auto"):
            raise ValueError(f"{self.task_id}: schedule_type must be 'manual', 'auto' or None")
        self.connector_id: str = connector_id or ""
        self.connector_name = connector_name
        self.destination_name = destination_name
        self.fivetran_conn_id = fivetran_conn_id
        self.force = force
        self.schedule_type = schedule_type
        self.wait_for_completion = wait_for_completion
        self.deferrable = default_deferrable() if deferrable is None else deferrable
        self.poll_frequency = float(poll_frequency)
        self.fallback_after = fallback_after
        self.reschedule_wait_time = reschedule_wait_time
        self.skip_if_synced_after_data_interval_end = skip_if_synced_after_data_interval_end
        self.redis_conn_id = redis_conn_id
        self.recheck_interval = recheck_interval
        self.redis_retry_timeout = redis_retry_timeout
        if min_deferral < 0:
            raise ValueError(f"{self.task_id}: min_deferral must be >= 0 seconds")
        self.min_deferral = float(min_deferral)
        self.wait_when_broken = wait_when_broken
        self.fail_when_overdue_after = fail_when_overdue_after
        # For already_synced: the run's data_interval_end, ended_after.
        self.target_time = None
        self.criterion = "ended_after"

    @cached_property
    def client(self) -> FivetranClient:
        return FivetranApiHook(self.fivetran_conn_id).get_conn()

    @cached_property
    def hook(self) -> FivetranEventsRedisHook:
        return FivetranEventsRedisHook(self.redis_conn_id)

    def _resolve_connector(self) -> None:
        if self.connector_id or self.connector_name is None:
            return
        self.connector_id = connector_id_in_fivetran(
            self.client, self.connector_name, str(self.destination_name)
        )
        self.log.info("connector name %r is connector %s", self.connector_name, self.connector_id)

    def _ask(self, after: Mapping[str, Any] | None = None) -> tuple[int, bool, bool]:
        """Ask Fivetran for the sync; return when, whether one ran, whether it was refused."""
        cid = self.connector_id
        conn = self.client.connection(cid)
        if conn.paused:
            raise FivetranSyncFailed(f"Fivetran connector {cid} is paused: no sync will run")
        if conn.setup_state == "broken" and not self.wait_when_broken:
            raise FivetranSyncFailed(
                f"Fivetran connector {cid} is broken (setup_state broken): fix its connection "
                "in Fivetran, or set wait_when_broken to ask anyway"
            )
        if self.schedule_type is not None and conn.schedule_type != self.schedule_type:
            self.log.info(
                "connector %s: schedule_type %s -> %s", cid, conn.schedule_type, self.schedule_type
            )
            self.client.update_connection(cid, {"schedule_type": self.schedule_type})
        recorded = self.hook.read_retrying(
            lambda r: r.facts(cid, now_ms()).running,
            f"the history of connector {cid}",
            self.redis_retry_timeout,
        )
        running = conn.sync_state == "syncing" or recorded is not None
        asked = now_ms()
        if not self._request(after):
            return asked, running, True
        if running:
            self.log.info(
                "connector %s was syncing: %s",
                cid,
                "Fivetran completes that sync, then runs the resync"
                if self._follows
                else "asked with force, so Fivetran stops that sync and runs a new one"
                if self.force
                else "Fivetran starts no second sync without force, so this task waits "
                "for that one to end and asks again",
            )
        self.log.info("connector %s: %s asked at %s", cid, self.mode, iso(asked))
        return asked, running, False

    #: Whether the requested sync follows one running (a resync completes it first).
    _follows = False

    def _request(self, after: Mapping[str, Any] | None) -> bool:
        """Make the request; return False when Fivetran refused it until a sync ends."""
        self.client.sync_connection(self.connector_id, force=self.force)
        return True

    def _trigger(self, asked_ms: int, running: bool, conflict: bool) -> FivetranSyncRequestTrigger:
        return FivetranSyncRequestTrigger(
            connector_id=self.connector_id,
            target_ms=asked_ms,
            # Refused, the request is made again after the running sync: as a plain sync.
            force=(self.force or self._follows) and not conflict,
            running_at_ask=running or conflict,
            conflict=conflict,
            fallback_after=self.fallback_after,
            poll_frequency=self.poll_frequency,
            reschedule_wait_time=self.reschedule_wait_time,
            fivetran_conn_id=self.fivetran_conn_id,
            redis_conn_id=self.redis_conn_id,
            recheck_interval=self.recheck_interval,
            retry_timeout=self.redis_retry_timeout,
            deferred_ms=now_ms(),
            min_deferral=self.min_deferral,
            wait_when_broken=self.wait_when_broken,
            fail_when_overdue_after=self.fail_when_overdue_after,
        )

    def execute(self, context: Context) -> Any:
        self._resolve_connector()
        if self.skip_if_synced_after_data_interval_end:
            done = already_synced(self, context)
            if done is not None:
                return self._result(done, None, reconciled=False)
        return self._ask_and_wait()

    def _ask_and_wait(self, after: Mapping[str, Any] | None = None) -> Any:
        while True:
            asked, running, conflict = self._ask(after)
            if not self.wait_for_completion and not conflict:
                return self._asked_result(asked)
            trigger = self._trigger(asked, running, conflict)
            if self.deferrable:
                self.defer(
                    trigger=trigger,
                    method_name="execute_complete",
                    timeout=self.execution_timeout,
                )
            event = asyncio.run(trigger.wait(self.hook.config, lambda: self.client))
            if not _asks_again(event):
                return self._finish(event)
            self.log.info("connector %s: %s", self.connector_id, event["message"])
            after = event

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Finish on the trigger's event; ask again when it says so."""
        # The id a connector_name was resolved to before deferring: no second lookup.
        self.connector_id = (event or {}).get("connector_id") or self.connector_id
        self._resolve_connector()
        if event and _asks_again(event):
            self.log.info("connector %s: %s", self.connector_id, event.get("message"))
            return self._ask_and_wait(event)
        return self._finish(event)

    def _finish(self, event: Mapping[str, Any] | None) -> Any:
        if not event or event.get("status") == UNAVAILABLE:
            message = (event or {}).get("message", "trigger ended without an answer")
            raise FivetranHistoryUnavailable(message)
        decision = Decision.from_dict(event["decision"])
        reconciled = bool(event.get("reconciled"))
        if reconciled:
            self._record(decision)
        sync = decision.sync
        if isinstance(sync, Completion) and isinstance(event.get("fired_at"), float):
            # The wake-up itself; Airflow's resume of the task comes a scheduler loop later.
            self.log.info(
                "connector %s: woken %.3f s after the sync ended",
                self.connector_id,
                event["fired_at"] - sync.ended_ms / 1000,
            )
        if decision.outcome is Outcome.SUCCESS:
            self.log.info("connector %s: %s", self.connector_id, decision.reason)
            return self._result(decision, event.get("asked_at"), reconciled=reconciled)
        raise FivetranSyncFailed(
            f"Fivetran connector {self.connector_id}: the {self.mode} asked at "
            f"{event.get('asked_at')} did not succeed: {decision.reason}"
        )

    def _asked_result(self, asked_ms: int) -> Any:
        """The XCom of a task that does not wait for completion."""
        return {"connector_id": self.connector_id, "asked_at": iso(asked_ms)}

    def _result(self, decision: Decision, asked_at: str | None, *, reconciled: bool) -> Any:
        sync = decision.sync.to_dict() if decision.sync is not None else {}
        return {
            **sync,
            "connector_id": self.connector_id,
            "asked_at": asked_at,
            "reconciled": reconciled,
        }

    def _record(self, decision: Decision) -> None:
        """Record the sync end read from Fivetran's API as ``reconcile`` does (derived
        ``~`` sync id), so a late webhook of the same sync finds it already known."""
        sync = decision.sync
        if not isinstance(sync, Completion):
            return
        cfg = self.hook.config
        event = Event(
            kind=EventKind.SYNC_END,
            event="sync_end",
            created=datetime.fromtimestamp(sync.ended_ms / 1000, tz=timezone.utc),
            connector_id=self.connector_id,
            sync_id=sync.sync_id,
            status=sync.status,
            reason=sync.reason,
            source=SOURCE_RECONCILED,
        )
        writer = HistoryWriter(self.hook.get_conn(), cfg.key_prefix, RETENTION_MS)
        try:
            result = writer.record(event)
        except NoPermissionError:  # Airflow's Redis user: the worker's reconcile records it
            msg = "connector %s: not recorded, Airflow's Redis user may not write the history"
            self.log.warning(msg, self.connector_id)
            return
        self.log.warning(
            "connector %s: recorded the sync end read from Fivetran's API (%s, sync id %s): %s",
            self.connector_id,
            iso(sync.ended_ms),
            sync.sync_id,
            result.status.value,
        )


class FivetranResyncOperator(FivetranSyncOperator):
    """Start a historical resync (``scope``: schema -> tables, None: all) and wait for it.
    Fivetran completes a running sync first: on a 409 the task waits for its end and asks
    once more. A RESCHEDULED resync goes on as a plain sync request."""

    mode = "resync"
    _follows = True

    def __init__(self, *, scope: Mapping[str, Sequence[str]] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        try:
            self.scope = resync_scope(scope)
        except ValueError as exc:
            raise ValueError(f"{self.task_id}: {exc}") from None

    def _request(self, after: Mapping[str, Any] | None) -> bool:
        # A rescheduled resync goes on as a plain sync, which a running one holds off.
        self._follows = after is None or bool(after.get("conflict"))
        if not self._follows:
            return super()._request(after)
        try:
            self.client.resync_connection(self.connector_id, self.scope)
        except FivetranRejected as exc:
            if exc.status != 409:
                raise
            if after is not None:
                raise FivetranSyncFailed(
                    f"Fivetran connector {self.connector_id}: the resync was refused again "
                    f"after the running sync ended: {exc}"
                ) from None
            self.log.warning(
                "connector %s: %s; waiting for the running sync to end to ask once more",
                self.connector_id,
                exc,
            )
            return False
        return True
