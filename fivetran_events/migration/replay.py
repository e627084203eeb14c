"""A v1 connector's rows back into the events that wrote them (pure: no I/O)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..model import Event, EventKind
from ..redis_url import as_text
from ..timeutil import from_ms
from .scan import UnreadableV1

Rows = Sequence[tuple[Any, float]]
T = TypeVar("T")


@dataclass(frozen=True)
class V1Rows:
    """One connector's v1 sets, as (member, score) rows."""

    ends: Rows = ()
    ok: Rows = ()
    fail: Rows = ()
    starts: Rows = ()
    running: Rows = ()
    resyncs: Rows = ()

    @property
    def completions(self) -> int:
        return len({as_text(m) for m, _ in (*self.ends, *self.ok, *self.fail)})


def _event(kind: EventKind, name: str, connector: str, ms: int, **more: Any) -> Event:
    return Event(kind=kind, event=name, created=from_ms(ms), connector_id=connector, **more)


def v1_events(connector: str, rows: V1Rows) -> list[Event]:
    """Turn one connector's v1 rows back into the events that wrote them, newest first.

    Each completion becomes its ``sync_end`` (status, reason, task type, at its end) led
    by the ``sync_start`` of its attempt when the member knows it (``b``); the ``starts``
    and ``running`` sets give the starts of syncs without a recorded end; ``resyncs``
    members give the resync events. The events carry the content the webhook saw, so
    their dedup ids are the original deliveries': a redelivery during or after the
    migration stays a duplicate. Newest first, each start just before its end, so a
    connector half replayed holds its newest syncs whole: a sensor waiting on a target
    after them reads the right answer or waits. Raises UnreadableV1 for a member that
    is not 0.1's JSON, before anything of the connector is written.
    """
    units: list[tuple[int, list[Event]]] = []
    for member in {as_text(m) for m, _ in (*rows.ends, *rows.ok, *rows.fail)}:
        units.append(_parsed(connector, member, lambda b: _completion(connector, b)))
    for sid, score in (*rows.running, *rows.starts):
        start = _event(
            EventKind.SYNC_START, "sync_start", connector, int(score), sync_id=as_text(sid)
        )
        units.append((int(score), [start]))
    for member, _score in rows.resyncs:
        units.append(_parsed(connector, as_text(member), lambda b: _resync(connector, b)))
    units.sort(key=lambda u: (u[0], [e.dedup_id for e in u[1]]), reverse=True)
    seen: set[str] = set()
    out: list[Event] = []
    for _t, unit in units:
        for e in unit:
            if e.dedup_id not in seen:
                seen.add(e.dedup_id)
                out.append(e)
    return out


def _parsed(connector: str, member: str, build: Callable[[Any], T]) -> T:
    """Build from a member's JSON; a member that is not 0.1's is UnreadableV1, named."""
    try:
        return build(json.loads(member))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UnreadableV1(connector, member, f"{type(exc).__name__}: {exc}") from None


def _completion(connector: str, body: dict[str, Any]) -> tuple[int, list[Event]]:
    """A completion's sync_end, led by its attempt's sync_start when the member has one."""
    sid, end = str(body["s"]), int(body["t"])
    unit = []
    if body.get("b") is not None:
        unit.append(
            _event(EventKind.SYNC_START, "sync_start", connector, int(body["b"]), sync_id=sid)
        )
    unit.append(
        _event(
            EventKind.SYNC_END,
            "sync_end",
            connector,
            end,
            sync_id=sid,
            status=str(body["st"]),
            reason=body.get("r"),
            task_type=body.get("tt"),
        )
    )
    return end, unit


def _resync(connector: str, body: dict[str, Any]) -> tuple[int, list[Event]]:
    tables = tuple(str(t) for t in body.get("tables", ()))
    t = int(body["t"])
    return t, [_event(EventKind.RESYNC, str(body["e"]), connector, t, tables=tables)]
