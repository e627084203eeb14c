"""Astronomer's ``fivetran_provider_async`` 2.4.0 classes, answered from the history.

Import from ``airflow_plugin.astronomer`` instead of ``fivetran_provider_async.operators``
and ``.sensors``: a DAG keeps its arguments, defaults, templated fields and XComs
(docs/migrating.md), its waits woken by the webhook instead of polling Fivetran's API.
"""

from __future__ import annotations

import warnings
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from fivetran_events import Completion, Decision, HistoryReader
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.keys import wait_from_key
from fivetran_events.timeutil import iso, now_ms

from .compat import AirflowFailException, AirflowNotFoundException, Context
from .hooks import DEFAULT_FIVETRAN_CONN_ID, FivetranApiHook, FivetranEventsRedisHook
from .operators import sync
from .sensors import FivetranDateTimeSensor

#: Seconds a task's first-try target (``FivetranSensor`` without ``completed_after_time``)
#: is kept for its retries.
WAIT_FROM_TTL = 14 * 86_400


def require_history(hook: FivetranEventsRedisHook, fivetran_conn_id: str) -> None:
    """Fail the task at once, saying how to fix it, when the history's connection is missing."""
    try:
        hook.config  # noqa: B018 (reads the connection)
    except AirflowNotFoundException as exc:
        conn = hook.redis_conn_id
        raise AirflowFailException(
            f"connection {conn!r} is not defined. airflow_plugin.astronomer reads Fivetran's "
            f"syncs from the webhook server's Redis through {conn!r}, beside "
            f"{fivetran_conn_id!r} (Fivetran's API). Add it, e.g. "
            f"AIRFLOW_CONN_{conn.upper()}='redis://:PASSWORD@REDIS_HOST:6379/0' "
            "(docs/migrating.md)"
        ) from exc


def _deprecated(kwargs: dict[str, Any], old: str, new: str, value: Any) -> Any:
    """Take astronomer's deprecated keyword ``old`` for ``new``, warning as it does."""
    if old not in kwargs:
        return value
    warnings.warn(
        f"kwarg `{old}` is deprecated. Please use `{new}` instead.",
        DeprecationWarning,
        stacklevel=3,
    )
    given = kwargs.pop(old)
    return given if value is None else value


def _which(
    connector_id: str | None, connector_name: str | None, destination_name: str | None
) -> dict[str, Any]:
    """Our classes' connector arguments: astronomer's take connector_id over the names."""
    named = connector_id is None
    return {
        "connector_id": connector_id,
        "connector_name": connector_name if named else None,
        "destination_name": destination_name if named else None,
    }


def _client(conn_id: str, retry_limit: int, retry_delay: float) -> FivetranClient:
    """Fivetran's API with astronomer's retries: ``retry_limit`` attempts in all, the first
    pause ``retry_delay`` seconds (it doubles, as our client's backoff does)."""
    return FivetranApiHook(
        conn_id, max_attempts=max(1, int(retry_limit)), backoff=float(retry_delay)
    ).get_conn()


class FivetranOperator(sync.FivetranSyncOperator):
    """Astronomer's ``FivetranOperator``: start a sync (restarting a running one, as its
    ``/force`` does) and, with ``wait_for_completion``, wait for its end. Returns (XCom) the
    ISO time of that end, or without waiting the time the sync was asked for, which
    ``FivetranSensor(completed_after_time=...)`` takes to wait for that sync."""

    template_fields = ("connector_id", "connector_name", "destination_name")

    def __init__(
        self,
        connector_id: str | None = None,
        connector_name: str | None = None,
        destination_name: str | None = None,
        run_name: str | None = None,
        fivetran_conn_id: str = DEFAULT_FIVETRAN_CONN_ID,
        fivetran_retry_limit: int = 3,
        fivetran_retry_delay: int = 1,
        poll_frequency: int = 15,
        schedule_type: str = "manual",
        reschedule_wait_time: int = 0,
        deferrable: bool = True,
        wait_for_completion: bool = True,
        **kwargs: Any,
    ) -> None:
        timeout = _deprecated(kwargs, "timeout_seconds", "execution_timeout", None)
        if timeout is not None and "execution_timeout" not in kwargs:
            seconds = isinstance(timeout, (int, float))
            kwargs["execution_timeout"] = timedelta(seconds=timeout) if seconds else timeout
        super().__init__(
            **_which(connector_id, connector_name, destination_name),
            fivetran_conn_id=fivetran_conn_id,
            force=True,
            schedule_type=schedule_type,
            wait_for_completion=wait_for_completion,
            deferrable=deferrable,
            poll_frequency=poll_frequency,
            reschedule_wait_time=reschedule_wait_time,
            **kwargs,
        )
        self.connector_name, self.destination_name = connector_name, destination_name
        self.run_name = run_name
        self.fivetran_retry_limit = fivetran_retry_limit
        self.fivetran_retry_delay = fivetran_retry_delay

    @cached_property
    def client(self) -> FivetranClient:
        return _client(self.fivetran_conn_id, self.fivetran_retry_limit, self.fivetran_retry_delay)

    def execute(self, context: Context) -> Any:
        require_history(self.hook, self.fivetran_conn_id)
        return super().execute(context)

    def _asked_result(self, asked_ms: int) -> Any:
        return iso(asked_ms)

    def _result(self, decision: Decision, asked_at: str | None, *, reconciled: bool) -> Any:
        ended = decision.sync
        return iso(ended.ended_ms) if isinstance(ended, Completion) else None


class FivetranResyncOperator(FivetranOperator, sync.FivetranResyncOperator):
    """Astronomer's ``FivetranResyncOperator``: a historical resync of ``scope`` (schema ->
    tables; None or empty: the whole connection), waited for as ``FivetranOperator``."""

    def __init__(self, scope: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(scope=scope or None, **kwargs)


class FivetranSensor(FivetranDateTimeSensor):
    """Astronomer's ``FivetranSensor``: wait for a sync completing after
    ``completed_after_time`` (templated; unset: after the latest completion recorded when
    the task first ran, kept by its retries). Returns None, as astronomer's does; a failed
    sync fails it (``FivetranSyncFailed``)."""

    template_fields = ("connector_id", "completed_after_time")

    def __init__(
        self,
        connector_id: str | None = None,
        connector_name: str | None = None,
        destination_name: str | None = None,
        fivetran_conn_id: str = DEFAULT_FIVETRAN_CONN_ID,
        poke_interval: int = 60,
        fivetran_retry_limit: int = 3,
        fivetran_retry_delay: int = 1,
        completed_after_time: str | datetime | None = None,
        reschedule_wait_time: int | None = None,
        always_wait_when_syncing: bool = False,
        propagate_failures_forward: bool = False,
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        completed_after_time = _deprecated(
            kwargs, "xcom", "completed_after_time", completed_after_time
        )
        reschedule_wait_time = _deprecated(
            kwargs, "reschedule_time", "reschedule_wait_time", reschedule_wait_time
        )
        if connector_id is None and (connector_name is None or destination_name is None):
            raise ValueError(
                f"{kwargs.get('task_id')}: give connector_id, or connector_name with "
                "destination_name"
            )
        super().__init__(
            **_which(connector_id, connector_name, destination_name),
            propagate_failures_forward=propagate_failures_forward,
            always_wait_when_syncing=always_wait_when_syncing,
            deferrable=deferrable,
            poke_interval=poke_interval,
            **kwargs,
        )
        self.connector_name, self.destination_name = connector_name, destination_name
        self.fivetran_conn_id = fivetran_conn_id
        self.fivetran_retry_limit = fivetran_retry_limit
        self.fivetran_retry_delay = fivetran_retry_delay
        self.reschedule_wait_time = reschedule_wait_time
        # A template field, so text, as astronomer keeps it ("": not given).
        if isinstance(completed_after_time, datetime):
            self.completed_after_time = completed_after_time.isoformat()
        elif isinstance(completed_after_time, str):
            self.completed_after_time = completed_after_time
        elif completed_after_time is None:
            self.completed_after_time = ""
        else:
            raise TypeError(
                "Expected None, str, or datetime.datetime type for completed_after_time."
                f" Got {type(completed_after_time)}"
            )

    def _resolve_connector(self) -> None:
        """Look the names up in Fivetran's API, as astronomer does (destination_name is
        the destination's display name, not a group id)."""
        if self.connector_id or self.connector_name is None:
            return
        client = _client(
            self.fivetran_conn_id, self.fivetran_retry_limit, self.fivetran_retry_delay
        )
        self.connector_id = sync.connector_id_in_fivetran(
            client, self.connector_name, str(self.destination_name)
        )
        self.log.info("connector name %r is connector %s", self.connector_name, self.connector_id)

    def _target_ms(self, context: Context) -> int:
        if self.completed_after_time:
            self.target_time = self.completed_after_time
            return super()._target_ms(context)
        target = self._first_try_target(context)
        self.log.info(
            "connector %s: target %s (after the latest completion recorded when this task "
            "first ran)",
            self.connector_id,
            iso(target),
        )
        return target

    def _first_try_target(self, context: Context) -> int:
        """Choose the target once per task instance: just after the latest completion
        recorded now (or now, when none is), kept in Redis for the task's retries."""
        ti: Any = context["ti"]
        key = wait_from_key(
            self.hook.config.key_prefix,
            *(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, self.connector_id),
        )

        def choose(r: HistoryReader) -> int:
            now = now_ms()
            latest = r.facts(self.connector_id, now).latest_before_target
            pipe = r.client.pipeline()  # MULTI: the first try's choice wins
            pipe.set(key, now if latest is None else latest.ended_ms + 1, nx=True, ex=WAIT_FROM_TTL)
            pipe.get(key)
            return int(pipe.execute()[1])

        return self.hook.read_retrying(
            choose, f"the history of connector {self.connector_id}", self.redis_retry_timeout
        )

    def _outcome(self, decision: Decision) -> dict[str, Any] | None:
        result = super()._outcome(decision)
        if self._recheck_at_ms is not None and self.reschedule_wait_time is not None:
            # astronomer's reschedule_wait_time overrides Fivetran's rescheduledAt.
            self._recheck_at_ms = now_ms() + int(self.reschedule_wait_time * 1000)
        return result

    def execute(self, context: Context) -> None:
        require_history(self.hook, self.fivetran_conn_id)
        super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> None:
        # Resumed: the connector's name serves for the messages; no second lookup.
        self.connector_id = self.connector_id or str(self.connector_name)
        super().execute_complete(context, event)


__all__ = ["FivetranOperator", "FivetranResyncOperator", "FivetranSensor", "require_history"]
