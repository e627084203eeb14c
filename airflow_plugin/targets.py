"""The target time of a run: what "synced as of this run" means.

The target is a pure function of the run, never of the wall clock when a task starts,
so a retried, rescheduled or restarted sensor waits for the same thing: ``target_time``,
else ``data_interval_end``, else (Airflow 3 asset-triggered and manual runs) the newest
triggering event's ``ended_at``, else ``run_after`` (the logical date on Airflow 2).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fivetran_events.timeutil import parse_iso, to_utc

from .compat import Context, run_after


def as_datetime(value: Any) -> datetime:
    """Return ``value`` (datetime or ISO 8601 text) as an aware UTC datetime."""
    if isinstance(value, datetime):
        return to_utc(value)
    if isinstance(value, str):
        return parse_iso(value)
    raise TypeError(f"target_time must be a datetime or ISO 8601 text, not {type(value).__name__}")


def resolve_target(target_time: Any, context: Context) -> tuple[datetime, str]:
    """Return the run's target and where it came from (for the log)."""
    if target_time not in (None, ""):
        return as_datetime(target_time), "target_time"
    end = context.get("data_interval_end")
    if end is not None:
        return as_datetime(end), "data_interval_end"
    event_time = _newest_triggering_event(context)
    if event_time is not None:
        return event_time, "the newest triggering asset event"
    after = run_after(context)
    if after is None:
        raise ValueError(
            "the run has no data interval, no triggering asset event and no "
            "run_after: pass target_time"
        )
    return as_datetime(after), "run_after (the run has no data interval)"


def _newest_triggering_event(context: Context) -> datetime | None:
    events: Any = context.get("triggering_asset_events")
    if events is None:
        events = context.get("triggering_dataset_events")
    if not events:
        return None
    newest: datetime | None = None
    for per_asset in events.values():
        for event in per_asset:
            when = _event_time(event)
            if when is not None and (newest is None or when > newest):
                newest = when
    return newest


def _event_time(event: Any) -> datetime | None:
    extra = getattr(event, "extra", None) or {}
    if isinstance(extra, dict) and isinstance(extra.get("payload"), dict):
        extra = extra["payload"]  # an AssetWatcher's event (triggers/watcher.py) nests it
    ended = extra.get("ended_at") if isinstance(extra, dict) else None
    if ended:
        try:
            return as_datetime(ended)
        except (TypeError, ValueError):
            pass
    stamp = getattr(event, "timestamp", None)
    return as_datetime(stamp) if stamp is not None else None
