"""Which periods a successful sync completes, as Airflow partition keys (pure).

A period [p, p + grain) is complete once a success counts for p + grain by the sensor's
criterion (``decision.Criterion``). A success's *count point* is the latest time it counts
for (its end, or under ``started_after`` its start); it completes the periods ending after
the previous success's count point and at or before its own. A history's first success
completes only the last period ending by its count point: nothing is known before it.

Hours and days are whole multiples of the epoch in UTC (no calendar, DST or leap seconds);
keys are a period's UTC start, in the format Airflow's temporal mappers read by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from .decision import Completion, Criterion
from .timeutil import UTC, from_ms, to_ms

Grain = Literal["hour", "day"]
#: A grain's length in milliseconds.
GRAIN_MS: dict[str, int] = {"hour": 3_600_000, "day": 86_400_000}
#: ``input_format`` of Airflow's temporal mappers (StartOfHourMapper, StartOfDayMapper...).
KEY_FORMAT = "%Y-%m-%dT%H:%M:%S"
#: The default cap on one sync's keys: 31 days' worth of periods.
CAP_DAYS = 31


@dataclass(frozen=True)
class Completed:
    """The keys a sync completes, oldest first, and how many older ones the cap left out."""

    keys: tuple[str, ...]
    skipped: int = 0
    #: The start of the oldest period left out, and of the newest (None when none was).
    skipped_from: str | None = None
    skipped_to: str | None = None


def default_cap(grain: Grain) -> int:
    return CAP_DAYS * GRAIN_MS["day"] // GRAIN_MS[grain]


def count_point(c: Completion, criterion: Criterion) -> int | None:
    """The latest time ``c`` counts for; None when it cannot count for any
    (``started_after`` and no recorded start)."""
    if criterion is Criterion.ENDED_AFTER:
        return c.ended_ms
    return c.started_ms


def completed_by(
    sync: Completion,
    previous: Completion | None,
    grain: Grain,
    criterion: Criterion = Criterion.ENDED_AFTER,
    cap: int | None = None,
) -> Completed:
    """Return the keys successful ``sync`` completes after the previous success (None: the first of
    the history); failures in between complete nothing, so they do not matter."""
    # Under started_after a previous success with no recorded start counted for nothing:
    # the sync is then the first that counts.
    before = None if previous is None else count_point(previous, criterion)
    return completed(count_point(sync, criterion), before, grain, cap)


def completed_each(
    successes: Sequence[Completion],
    previous: Completion | None,
    grain: Grain,
    criterion: Criterion = Criterion.ENDED_AFTER,
) -> list[Completed]:
    """Return what each of ``successes`` (oldest first) completed, uncapped, after
    ``previous``, the success before the first (None: the history's first)."""
    out = []
    for c in successes:
        out.append(completed_by(c, previous, grain, criterion, cap=1 << 31))
        previous = c
    return out


def partition_key(start_ms: int) -> str:
    return from_ms(start_ms).strftime(KEY_FORMAT)


def key_start_ms(key: str) -> int:
    """The start of the period ``key`` names (``partition_key``'s inverse)."""
    return to_ms(datetime.strptime(key, KEY_FORMAT).replace(tzinfo=UTC))


def completed(
    point_ms: int | None, previous_ms: int | None, grain: Grain, cap: int | None = None
) -> Completed:
    """The keys of the periods ending in (``previous_ms``, ``point_ms``]; with no previous
    success only the last one ending by ``point_ms``. At most ``cap`` (default 31 days'
    worth), the newest: the rest are reported, for ``replay --partitions`` to post."""
    if point_ms is None:
        return Completed(())
    size = GRAIN_MS[grain]
    last_end = point_ms // size * size
    first_end = last_end if previous_ms is None else previous_ms // size * size + size
    if first_end > last_end:
        return Completed(())
    count = (last_end - first_end) // size + 1
    limit = default_cap(grain) if cap is None else cap
    kept = min(count, limit)
    newest_start = last_end - size
    keys = tuple(partition_key(newest_start - i * size) for i in reversed(range(kept)))
    skipped = count - kept
    if not skipped:
        return Completed(keys)
    return Completed(
        keys,
        skipped,
        skipped_from=partition_key(first_end - size),
        skipped_to=partition_key(newest_start - kept * size),
    )
