"""The target time of a run: what "synced as of this run" means.

A pure function of the run, never of the wall clock, so a retried, rescheduled or restarted
sensor waits for the same thing: ``target_time``, else ``data_interval_end``, else (Airflow
3.2+ partitioned runs) the end of the run's partition, else (Airflow 3 asset-triggered and
manual runs) the newest triggering event's ``ended_at``, else ``run_after`` (Airflow 2's
logical date). A partition ends at its start (``partition_date``, else the key read in UTC)
plus the period its key's format names: Airflow's temporal mappers' default formats,
``%Y-%m-%dT%H`` an hour to ``%Y`` a year. Another format (IdentityMapper's
``%Y-%m-%dT%H:%M:%S`` names a start, not a length) needs target_time.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from fivetran_events.timeutil import UTC, parse_iso, to_utc

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
    partition = _partition_end(context)
    if partition is not None:
        return partition
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


#: Key formats of Airflow's temporal partition mappers (their ``default_output_format``)
#: -> (the strptime format of the key's start, the period in months or as a timedelta).
PARTITION_PERIODS: tuple[tuple[re.Pattern[str], str, int | timedelta], ...] = (
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}\Z"), "%Y-%m-%dT%H", timedelta(hours=1)),
    (re.compile(r"\d{4}-\d{2}-\d{2}\Z"), "%Y-%m-%d", timedelta(days=1)),
    (re.compile(r"(\d{4}-\d{2}-\d{2}) \(W\d{2}\)\Z"), "%Y-%m-%d", timedelta(days=7)),
    (re.compile(r"\d{4}-\d{2}\Z"), "%Y-%m", 1),
    (re.compile(r"(\d{4})-Q([1-4])\Z"), "", 3),
    (re.compile(r"\d{4}\Z"), "%Y", 12),
)


def partition_end(key: str, start: datetime | None = None) -> datetime:
    """Return the end of the partition ``key`` names (``start``: the run's partition_date,
    in the mapper's timezone); ValueError for a key that names no period."""
    for pattern, fmt, period in PARTITION_PERIODS:
        m = pattern.match(key.strip())
        if m is None:
            continue
        if start is None:
            if not fmt:  # a quarter: its first month
                text, fmt = f"{m.group(1)}-{3 * int(m.group(2)) - 2:02d}", "%Y-%m"
            else:
                text = m.group(1) if m.groups() else m.group(0)
            start = datetime.strptime(text, fmt).replace(tzinfo=UTC)
        if isinstance(period, timedelta):
            return start + period  # wall-clock arithmetic: a local day stays a day
        months = start.month - 1 + period
        return start.replace(year=start.year + months // 12, month=months % 12 + 1)
    raise ValueError(
        f"the run's partition key {key!r} names no period (an hour, a day, a week, a "
        "month, a quarter or a year, as Airflow's temporal mappers write them): pass "
        "target_time"
    )


def _partition_end(context: Context) -> tuple[datetime, str] | None:
    dag_run = context.get("dag_run")
    key = context.get("partition_key") or getattr(dag_run, "partition_key", None)
    if not key:
        return None
    start = context.get("partition_date") or getattr(dag_run, "partition_date", None)
    end = partition_end(str(key), start if isinstance(start, datetime) else None)
    return as_datetime(end), f"the end of partition {key}"


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
