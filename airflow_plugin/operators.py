"""Skip triggering a Fivetran sync when the history shows one already happened.

Place ``FivetranSyncShortCircuitOperator`` before the Fivetran provider's
``FivetranOperator``: when a successful sync counts for the run's target (by default at
or after ``data_interval_end``), the downstream tasks are skipped and no sync is forced;
otherwise they run as usual. It reads the history, so it costs no Fivetran API call.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fivetran_events import Decision, Outcome, parse_criterion
from fivetran_events.timeutil import iso, to_ms

from .compat import Context, ShortCircuitOperator
from .hooks import DEFAULT_CONN_ID, FivetranEventsRedisHook
from .targets import resolve_target


def _sync_needed(**context: Any) -> bool:
    op: FivetranSyncShortCircuitOperator = context["task"]
    return op.sync_needed(context)  # type: ignore[arg-type]


class FivetranSyncShortCircuitOperator(ShortCircuitOperator):
    """Continue downstream only if no successful sync counts for the run's target yet.

    :param connector_id: the Fivetran connector id (templated).
    :param target_time: datetime or ISO 8601 text (templated); default: the run's target
        as the sensor computes it (``data_interval_end``, with the same fallback).
    :param criterion: ``ended_after`` (default) or ``started_after``.
    :param redis_conn_id: the Airflow connection of the history's Redis.
    """

    template_fields = (*ShortCircuitOperator.template_fields, "connector_id", "target_time")

    def __init__(
        self,
        *,
        connector_id: str,
        target_time: datetime | str | None = None,
        criterion: str = "ended_after",
        redis_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(python_callable=_sync_needed, **kwargs)
        self.connector_id = connector_id
        self.target_time = target_time
        self.criterion = parse_criterion(criterion).value
        self.redis_conn_id = redis_conn_id

    def sync_needed(self, context: Context) -> bool:
        """Return False (skip downstream) when a success already counts for the target."""
        return already_synced(self, context) is None


def already_synced(op: Any, context: Context) -> Decision | None:
    """The SUCCESS that makes a sync needless for ``op``'s target, or None (sync).

    ``op`` names ``connector_id``, ``target_time``, ``criterion`` and ``redis_conn_id``
    (this operator, and ``FivetranSyncOperator``'s ``skip_if_synced_after_data_interval_end``).
    """
    target, source = resolve_target(op.target_time, context)
    reader = FivetranEventsRedisHook(op.redis_conn_id).reader()
    decision = reader.decide(
        op.connector_id, to_ms(target), criterion=op.criterion, propagate_failures_forward=False
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
