"""Turn what queries.py read into the view's HTML: the timeline's geometry, the calendar.

Templates are autoescaped: connector names and failure reasons come from Fivetran.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape

from fivetran_events import Decision
from fivetran_events.freshness import late_text
from fivetran_events.timeutil import from_ms, iso, to_ms

from .queries import Bar, Flags

#: The timeline's drawing width and one lane's height, in SVG units (it scales to fit).
WIDTH = 960
LANE = 22
#: Overlapping syncs go to lanes of their own, up to this many (the rest share the last).
MAX_LANES = 4
#: Epoch ms of the last instant a label can name (``datetime.max``, 9999-12-31).
LAST_MS = to_ms(datetime.max)
#: The narrowest bar: an end without a recorded start is drawn as a tick this wide.
MIN_BAR = 3.0

ENV = Environment(
    loader=PackageLoader("airflow_plugin.ui", "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters["iso"] = iso
ENV.filters["duration"] = late_text


def page(template: str, **context: Any) -> str:
    """Render one of the view's templates."""
    return ENV.get_template(template).render(**context)


@dataclass(frozen=True)
class DrawnBar:
    bar: Bar
    x: float
    width: float
    lane: int
    open_end: bool  # running: it has no end yet


def _lanes(bars: list[Bar], now: int) -> list[int]:
    """Give each bar the first lane whose previous bar ended before it starts."""
    ends: list[int] = []
    out = [0] * len(bars)
    order = sorted(range(len(bars)), key=lambda i: _span(bars[i], now)[0])
    for i in order:
        start, end = _span(bars[i], now)
        lane = next((n for n, e in enumerate(ends) if e <= start), None)
        if lane is None:
            lane = min(len(ends), MAX_LANES - 1)
            if lane == len(ends):
                ends.append(end)
        ends[lane] = max(ends[lane], end)
        out[i] = lane
    return out


def _span(bar: Bar, now: int) -> tuple[int, int]:
    end = bar.end_ms if bar.end_ms is not None else now
    start = bar.start_ms if bar.start_ms is not None else end
    return start, max(start, end)


def draw_timeline(bars: list[Bar], since_ms: int, until_ms: int, now: int) -> list[DrawnBar]:
    """Place each sync on the range's axis; running syncs stretch to now (or the end)."""
    scale = WIDTH / max(1, until_ms - since_ms)

    def x(ms: int) -> float:
        return (min(max(ms, since_ms), until_ms) - since_ms) * scale

    drawn = []
    for bar, lane in zip(bars, _lanes(bars, now), strict=True):
        start, end = _span(bar, now)
        left, right = x(start), x(end)
        width = max(MIN_BAR, right - left)
        drawn.append(DrawnBar(bar, min(left, WIDTH - width), width, lane, bar.end_ms is None))
    return drawn


def ticks(since_ms: int, until_ms: int, day_ms: int = 86_400_000) -> list[tuple[float, str]]:
    """Day ticks of the axis (every n-th day when the range is long), as (x, label)."""
    days = max(1, (until_ms - since_ms) // day_ms)
    step = max(1, -(-days // 16))
    scale = WIDTH / max(1, until_ms - since_ms)
    out = []
    for n in range(0, days + 1, step):
        ms = since_ms + n * day_ms
        if ms > LAST_MS:  # the range ends on 9999-12-31: its closing tick has no date
            break
        out.append(((ms - since_ms) * scale, from_ms(ms).strftime("%b %-d")))
    return out


@dataclass(frozen=True)
class Cell:
    day: date
    decision: Decision
    href: str


def calendar_cells(
    decisions: list[Decision], flags: Flags, first: date, last: date
) -> tuple[list[Cell], int]:
    """Return the calendar's cells and how many blank cells precede the first (Monday first)."""
    base = {**flags.as_params(), "start": first.isoformat(), "end": last.isoformat()}
    cells = [
        Cell(
            from_ms(d.target_ms).date(),
            d,
            "?" + urlencode({**base, "target": str(iso(d.target_ms))}),
        )
        for d in decisions
    ]
    return cells, first.weekday()
