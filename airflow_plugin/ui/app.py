"""The view's FastAPI app: a list of connectors and one page per connector.

Every route sits behind Airflow's auth (the website view, any logged-in role): none is anonymous.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

import redis
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse

from fivetran_events import HistoryReader, parse_criterion
from fivetran_events.model import ID_PATTERN
from fivetran_events.partitions import Grain
from fivetran_events.settings import history_defaults
from fivetran_events.text import parse_flag
from fivetran_events.timeutil import from_ms, now_ms, parse_iso, to_ms

from ..exceptions import ViewError
from . import queries, render
from .queries import Flags

#: Days the calendar shows when the request names no range.
DEFAULT_DAYS = 31
_ID = re.compile(ID_PATTERN)


def _auth() -> Any:
    # Imported here: this module is loaded only in the API server (ui.LazyApp).
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    return Depends(requires_access_view(AccessView.WEBSITE))


def _hook_reader() -> HistoryReader:
    from ..hooks import FivetranEventsRedisHook

    return FivetranEventsRedisHook().reader()


def create_app(reader_factory: Callable[[], HistoryReader] = _hook_reader) -> FastAPI:
    """Build the app; ``reader_factory`` gives the history reader (the plugin's hook)."""
    app = FastAPI(
        title="Fivetran syncs",
        dependencies=[_auth()],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.reader = None

    def reader() -> HistoryReader:
        # Built on first use and kept: the hook's client holds the connection pool.
        if app.state.reader is None:
            try:
                app.state.reader = reader_factory()
            except Exception as exc:  # a missing or malformed Airflow connection
                raise ViewError(503, f"cannot use the history's connection: {exc}") from exc
        return app.state.reader  # type: ignore[no-any-return]

    @app.exception_handler(ViewError)
    async def view_error(request: Request, exc: ViewError) -> HTMLResponse:
        body = render.page("error.html", status=exc.status, message=exc.message)
        return HTMLResponse(body, status_code=exc.status)

    @app.exception_handler(redis.RedisError)
    async def redis_error(request: Request, exc: redis.RedisError) -> HTMLResponse:
        message = f"cannot read the sync history from Redis: {exc}"
        return HTMLResponse(render.page("error.html", status=503, message=message), 503)

    @app.get("/", response_class=HTMLResponse)
    def connectors(request: Request) -> HTMLResponse:
        q = request.query_params
        offset = _int(q.get("offset"), "offset", 0, 0, 10**9)
        limit = _int(q.get("limit"), "limit", 200, 1, queries.MAX_CONNECTORS)
        rows, total = queries.connector_page(reader(), offset, limit, now_ms())
        return _html("connectors.html", rows=rows, total=total, offset=offset, limit=limit)

    @app.get("/connectors/{connector_id}", response_class=HTMLResponse)
    def connector(request: Request, connector_id: str) -> HTMLResponse:
        hist = reader()
        if not _ID.fullmatch(connector_id) or not hist.known(connector_id):
            raise ViewError(404, f"no sync of connector {connector_id!r} has been recorded")
        q = request.query_params
        flags = _flags(q)
        target = _time(q.get("target"), "target")
        first, last = _range(q.get("start"), q.get("end"), target)
        try:
            targets = queries.day_targets(first, last)
        except ValueError as exc:
            raise ViewError(400, f"start/end: {exc}") from None
        limit = _int(q.get("limit"), "limit", queries.MAX_SYNCS, 1, queries.MAX_SYNCS)
        now = now_ms()
        since = targets[0]
        until = targets[-1] + 86_400_000
        bars, more = queries.timeline(hist, connector_id, since, until - 1, now, limit)
        grain = _grain(q.get("partitions"))
        done = (
            queries.partitions(hist, connector_id, since, until - 1, grain, flags.criterion)
            if grain is not None
            else {}
        )
        decisions = queries.calendar(hist, connector_id, targets, flags, now)
        chosen = queries.decide_at(hist, connector_id, target, flags, now) if target else None
        cells, blanks = render.calendar_cells(decisions, flags, first, last)
        return _html(
            "connector.html",
            connector_id=connector_id,
            flags=flags,
            target=target,
            chosen=chosen,
            first=first,
            last=last,
            cells=cells,
            blanks=blanks,
            bars=render.draw_timeline(bars, since, until, now),
            more=more,
            limit=limit,
            grain=grain,
            partitions=done,
            ticks=render.ticks(since, until),
            width=render.WIDTH,
            lane=render.LANE,
        )

    return app


def _html(template: str, **context: Any) -> HTMLResponse:
    return HTMLResponse(render.page(template, **context))


def _int(raw: str | None, name: str, default: int, low: int, high: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ViewError(400, f"{name} must be a whole number, not {raw!r}") from None
    if not low <= value <= high:
        raise ViewError(400, f"{name} must be from {low} to {high}, not {value}")
    return value


def _bool(raw: str | None, name: str, default: bool) -> bool:
    try:
        return default if not raw else parse_flag(raw, name)
    except ValueError as exc:
        raise ViewError(400, str(exc)) from None


def _grain(raw: str | None) -> Grain | None:
    """The page's ``partitions`` (hour, day, none), by default the deployment's grain."""
    if raw is None:
        return history_defaults().partition_grain
    if raw in ("", "none"):
        return None
    if raw not in ("hour", "day"):
        raise ViewError(400, f"partitions must be hour, day or none, not {raw[:20]!r}")
    return "hour" if raw == "hour" else "day"


def _flags(q: Any) -> Flags:
    names = (
        "propagate_failures_forward",
        "always_wait_when_syncing",
        "wait_when_paused",
        "wait_when_broken",
    )
    bools = {n: _bool(q.get(n), n, getattr(Flags, n)) for n in names}
    try:
        return Flags(parse_criterion(q.get("criterion") or Flags.criterion), **bools)
    except ValueError as exc:
        raise ViewError(400, str(exc)) from None


def _time(raw: str | None, name: str) -> int | None:
    if raw is None or raw == "":
        return None
    try:
        return to_ms(parse_iso(raw))
    except (ValueError, OverflowError):
        raise ViewError(
            400, f"{name} must be an ISO 8601 time such as 2026-01-10T00:00:00Z, not {raw!r}"
        ) from None


def _day(raw: str | None, name: str) -> date | None:
    if raw is None or raw == "":
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        ms = _time(raw, name)
        return None if ms is None else from_ms(ms).date()


def _shift(day: date, days: int, name: str) -> date:
    """Return ``day`` moved by ``days``; a 400 naming ``name`` past 0001-01-01 or 9999-12-31."""
    try:
        return day + timedelta(days=days)
    except OverflowError:
        edge = "9999-12-31" if days > 0 else "0001-01-01"
        raise ViewError(
            400,
            f"{name}: a calendar reaching {abs(days)} days {'after' if days > 0 else 'before'} "
            f"{day} would pass {edge}; give start and end inside 0001-01-01 to 9999-12-31",
        ) from None


def _range(start: str | None, end: str | None, target: int | None) -> tuple[date, date]:
    """Return the calendar's first and last day: as asked, else around the target or today."""
    first, last = _day(start, "start"), _day(end, "end")
    span = DEFAULT_DAYS - 1
    last_from = "end"  # the parameter a default range is counted from, for the 400
    if first is None and last is None:
        anchor = from_ms(target).date() if target is not None else from_ms(now_ms()).date()
        last = _shift(anchor, 7, "target") if target is not None else anchor
        last_from = "target"
    if first is None:
        assert last is not None
        first = _shift(last, -span, last_from)
    if last is None:
        last = _shift(first, span, "start")
    if last < first:
        raise ViewError(400, f"end ({last}) is before start ({first})")
    return first, last
