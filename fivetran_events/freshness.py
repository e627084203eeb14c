"""When a connector is due: its last success plus its objective and a grace (pure).

The objective is Fivetran's schedule, as reconcile stored it with the connector's record
(``Schedule``), unless the objectives file names one (seconds, the longest a connector
may go without a success)::

    # fivetran-objectives.toml
    [connectors]
    assimilate_seem = 7200

Manual (Airflow triggers it) and paused connectors are never overdue by schedule.
``daily_sync_time`` is read in UTC: the destination's time zone is not in Fivetran's list.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .exceptions import ConfigurationError
from .timeutil import iso

if TYPE_CHECKING:
    from .settings import HistoryDefaults

MINUTE_MS = 60_000
DAY_MS = 1440 * MINUTE_MS
#: The least grace: Fivetran starts a scheduled sync within minutes of its time.
MIN_GRACE_MS = 15 * MINUTE_MS


@dataclass(frozen=True)
class Schedule:
    """A connection's schedule and setup state, as Fivetran's list said at ``seen_at``."""

    sync_frequency: int | None = None
    daily_sync_time: str | None = None
    schedule_type: str | None = None
    paused: bool = False
    setup_state: str | None = None
    seen_at: str | None = None

    @classmethod
    def from_meta(cls, raw: object) -> Schedule | None:
        """Read the ``schedule`` a connector's record holds (None: reconcile never saw it)."""
        if not isinstance(raw, Mapping):
            return None
        freq, daily = raw.get("sync_frequency"), raw.get("daily_sync_time")
        kind, setup, seen = raw.get("schedule_type"), raw.get("setup_state"), raw.get("seen_at")
        return cls(
            freq if type(freq) is int and freq > 0 else None,
            daily if isinstance(daily, str) and _daily_ms(daily) is not None else None,
            kind if isinstance(kind, str) else None,
            raw.get("paused") is True,
            setup if isinstance(setup, str) else None,
            seen if isinstance(seen, str) else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _daily_ms(text: str) -> int | None:
    """``HH:MM`` as milliseconds after midnight (None: not such a time)."""
    hours, sep, minutes = text.partition(":")
    if not (sep and hours.isdigit() and minutes.isdigit()):
        return None
    h, m = int(hours), int(minutes)
    return (h * 60 + m) * MINUTE_MS if h < 24 and m < 60 else None


def late_text(seconds: int) -> str:
    """How late, for people: ``2h05m``, ``45m00s``."""
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds % 60:02d}s"


def grace_ms(frequency_ms: int, grace_s: float | None = None) -> int:
    """The grace setting, or by default the larger of 15 minutes and a quarter of the frequency."""
    return int(grace_s * 1000) if grace_s is not None else max(MIN_GRACE_MS, frequency_ms // 4)


def due_ms(
    schedule: Schedule | None,
    last_success_ms: int | None,
    *,
    objective_s: float | None = None,
    grace_s: float | None = None,
    stopped: bool = False,
) -> int | None:
    """When the connector is overdue without another success (None: it has no objective,
    is manual, paused or ``stopped``, or never succeeded)."""
    if stopped or last_success_ms is None or (schedule is not None and schedule.paused):
        return None
    if objective_s is not None:
        return last_success_ms + int(objective_s * 1000)
    if schedule is None or schedule.schedule_type == "manual" or not schedule.sync_frequency:
        return None
    freq = schedule.sync_frequency * MINUTE_MS
    daily = _daily_ms(schedule.daily_sync_time or "") if freq == DAY_MS else None
    if daily is None:
        return last_success_ms + freq + grace_ms(freq, grace_s)
    # The first scheduled start after the last success, then the sync's grace.
    start = last_success_ms - last_success_ms % DAY_MS + daily
    if start <= last_success_ms:
        start += DAY_MS
    return start + grace_ms(freq, grace_s)


class Record(Protocol):
    """What the due time reads of a connector's record (history.reader.ConnectorRecord)."""

    @property
    def connector_id(self) -> str: ...
    @property
    def schedule(self) -> Schedule | None: ...
    @property
    def stopped(self) -> bool: ...


@functools.lru_cache(maxsize=4)
def _load(grace_s: float | None, objectives_file: str | None) -> Freshness:
    return Freshness.load(grace_s, objectives_file)


@dataclass(frozen=True)
class Freshness:
    """The grace setting and the explicit objectives, applied to a connector's record."""

    grace_s: float | None = None
    objectives: Mapping[str, float] = field(default_factory=dict)

    def due_ms(self, rec: Record, last_ms: int | None) -> int | None:
        return due_ms(
            rec.schedule,
            last_ms,
            objective_s=self.objectives.get(rec.connector_id),
            grace_s=self.grace_s,
            stopped=rec.stopped,
        )

    def describe(self, rec: Record, last_ms: int | None, now_ms: int) -> dict[str, Any]:
        """``due_at``, ``overdue`` and ``overdue_seconds`` (0 on time; None: no due time)."""
        due = self.due_ms(rec, last_ms)
        late = None if due is None else max(0, now_ms - due) // 1000
        return {"due_at": iso(due), "overdue": bool(late), "overdue_seconds": late}

    @classmethod
    def from_settings(cls, settings: HistoryDefaults) -> Freshness:
        """The settings' grace and objectives; the file is read once per process."""
        return _load(settings.overdue_grace_seconds, settings.freshness_objectives_file)

    @classmethod
    def load(cls, grace_s: float | None, objectives_file: str | None) -> Freshness:
        """Read the objectives file (if any); raise ConfigurationError saying what to fix."""
        if not objectives_file:
            return cls(grace_s)
        from .uris import read_mapping  # one reader for both mapping files

        variable = "FIVETRAN_EVENTS_FRESHNESS_OBJECTIVES_FILE"
        path = Path(objectives_file)
        data = read_mapping(path, variable)
        where = f"{variable} ({path})"
        table = data.get("connectors") if isinstance(data, dict) else None
        if not isinstance(table, dict):
            raise ConfigurationError(f"{where}: expected a 'connectors' table of seconds")
        out: dict[str, float] = {}
        for cid, value in table.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigurationError(f"{where}: connector '{cid}' must map to seconds > 0")
            out[str(cid)] = float(value)
        return cls(grace_s, out)
