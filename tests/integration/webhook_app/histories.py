"""Hypothesis strategies of Fivetran histories that leave connectors in every state.

A history is a list of webhook bodies, in delivery order (which need not be time order),
for a few connectors: syncs started and ended under every status Fivetran sends or may
add, RESCHEDULED with and without ``rescheduledAt``, events without ``sync_id`` (derived
ids), syncs still running (started minutes ago) or stale, and the lifecycle events that
pause, resume, delete, break or mend a connector, with reasons and task types of odd text.
Times are drawn relative to ``now``, so "running" means running when the API is asked.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from fivetran_events.timeutil import iso
from testkit.support import payload

#: The connectors a history speaks of; the API is also asked about one it never saw.
CONNECTORS = ("assimilate_seem", "paused.or-not", "c3")
NEVER_SEEN = "never_seen"
#: The connectors ``every_state`` records: running, failed, paused, deleted, derived ids.
SEEDED = ("assimilate_seem", "failed_last", "paused_one", "deleted_one", "derived_only")
#: Every status of a ``sync_end``: Fivetran's own, and ones it may add (kept verbatim).
END_STATUSES: tuple[str | int, ...] = (
    "SUCCESSFUL",
    "FAILED",
    "FAILURE",
    "FAILURE_WITH_TASK",
    "RESCHEDULED",
    "CANCELED",
    "PAUSED_BY_SYSTEM",
    "successful",
    "\u00c9CHEC \u2028",
    42,  # a number: kept as its text
)
LIFECYCLE = (
    "pause_connector",
    "pause_connection",
    "resume_connector",
    "resume_connection",
    "delete_connector",
    "delete_connection",
    "create_connector",
    "edit_connector",
    "force_update_connection",
    "connection_successful",
    "connection_failure",
)
#: A small pool, so that ends pair with starts and some ids recur across syncs.
SYNC_IDS = ("s1", "s2", "s3", "s-4.x")
MINUTE = 60
DAY = 24 * 60 * MINUTE

#: Reasons and task types as people and machines write them.
odd_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            "\u0000",
            "quota exceeded\nretry at 05:00",
            "\u00fc" * 256,  # the longest taskType taken
            '{"looks": "like json"}',
            "<b>html</b> & 'quotes' \"too\"",
            "\U0001f525 rtl \u202e text",
        ]
    ),
    st.just({"code": 7, "detail": ["not", "text"]}),  # stored as its JSON
)


def _at(now: datetime, seconds_ago: int) -> str:
    return iso(now - timedelta(seconds=seconds_ago)) or ""


def _sync_body(
    event: str, connector: str, sync_id: str | None, created: str, new_names: bool, **data: Any
) -> dict[str, Any]:
    """A sync event's body; without ``sync_id`` when it is None."""
    body = payload(
        event, connector_id=connector, created=created, sync_id=sync_id, new_names=new_names, **data
    )
    if sync_id is None:
        del body["sync_id"]  # Fivetran leaves it out at times: the id is derived
    return body


@st.composite
def sync_bodies(draw: st.DrawFn, now: datetime) -> list[dict[str, Any]]:
    """One sync: its start and end, its end alone, or its start alone (running or stale)."""
    connector = draw(st.sampled_from(CONNECTORS))
    sync_id = draw(st.none() | st.sampled_from(SYNC_IDS))
    new_names = draw(st.booleans())
    shape = draw(st.sampled_from(["start+end", "end", "start"]))
    if shape == "start":
        # Half of them started minutes ago (running), the rest days ago (stale).
        started = draw(st.integers(0, 90 * MINUTE) | st.integers(2 * DAY, 6 * DAY))
        return [_sync_body("sync_start", connector, sync_id, _at(now, started), new_names)]
    started = draw(st.integers(10 * MINUTE, 8 * DAY))
    ended = started - draw(st.integers(0, min(started, 6 * 60 * MINUTE)))
    # Most syncs succeed; RESCHEDULED is drawn often too, so that it is often the latest end.
    status = draw(st.sampled_from(("SUCCESSFUL", "RESCHEDULED")) | st.sampled_from(END_STATUSES))
    data: dict[str, Any] = {}
    if draw(st.booleans()):
        data["reason"] = draw(odd_text)
    if draw(st.booleans()):
        data["taskType"] = draw(odd_text)
    if status == "RESCHEDULED":
        again = draw(
            st.integers(-DAY, DAY).map(lambda s: _at(now, s))
            | st.sampled_from([None, "soon", "", 1_767_225_600])  # absent, or not a time
        )
        if again is not None:
            data["rescheduledAt"] = again
    end = _sync_body(
        "sync_end", connector, sync_id, _at(now, ended), new_names, status=status, **data
    )
    if shape == "end":
        return [end]
    return [_sync_body("sync_start", connector, sync_id, _at(now, started), new_names), end]


@st.composite
def lifecycle_bodies(draw: st.DrawFn, now: datetime) -> list[dict[str, Any]]:
    """One lifecycle event, sometimes with a reason (a ``connection_failure``'s is kept)."""
    event = draw(st.sampled_from(LIFECYCLE))
    data: dict[str, Any] = {"reason": draw(odd_text)} if draw(st.booleans()) else {}
    created = _at(now, draw(st.integers(0, 8 * DAY)))
    body = payload(event, connector_id=draw(st.sampled_from(CONNECTORS)), created=created, **data)
    return [body]


def histories(now: datetime, max_syncs: int = 12) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Webhook bodies in delivery order: syncs and lifecycle events of ``CONNECTORS``."""
    one = sync_bodies(now) | lifecycle_bodies(now)
    return st.lists(one, min_size=1, max_size=max_syncs).map(
        lambda groups: [body for group in groups for body in group]
    )


def every_state(now: datetime) -> list[dict[str, Any]]:
    """A fixed history that leaves each connector of ``SEEDED`` in another state."""
    ok, failed, paused, deleted, derived = SEEDED

    def sync(
        connector: str, sync_id: str | None, ago: int, status: str, **data: Any
    ) -> list[dict[str, Any]]:
        return [
            _sync_body("sync_start", connector, sync_id, _at(now, ago + 30 * MINUTE), False),
            _sync_body("sync_end", connector, sync_id, _at(now, ago), False, status=status, **data),
        ]

    return [
        # Running now, after a success, a failure with a task, CANCELED, a status nobody
        # knows, and a RESCHEDULED end with its rescheduledAt as the latest end.
        *sync(ok, "ok-1", 5 * DAY, "SUCCESSFUL"),
        *sync(ok, "ok-2", 4 * DAY, "FAILURE_WITH_TASK", reason="quota\n", taskType="fix \u2603"),
        *sync(ok, "ok-3", 3 * DAY, "CANCELED"),
        *sync(ok, "ok-4", 2 * DAY, "PAUSED_BY_SYSTEM", reason={"code": 7}),
        *sync(ok, "ok-5", DAY, "RESCHEDULED", rescheduledAt=_at(now, -DAY)),
        _sync_body("sync_start", ok, "ok-6", _at(now, MINUTE), False),
        # Failed last, its rescheduled retry without rescheduledAt, a stale start.
        *sync(failed, "f-1", 3 * DAY, "FAILED", reason="no route to host"),
        *sync(failed, "f-2", 2 * DAY, "RESCHEDULED"),
        _sync_body("sync_start", failed, "f-3", _at(now, 3 * DAY), False),
        # Paused after a success: the decision fails unless wait_when_paused.
        *sync(paused, "p-1", 3 * DAY, "SUCCESSFUL"),
        payload("pause_connector", connector_id=paused, created=_at(now, 2 * DAY)),
        # Deleted (Fivetran's newer name) after a connection failure with its reason.
        *sync(deleted, "d-1", 3 * DAY, "FAILURE"),
        payload("connection_failure", connector_id=deleted, created=_at(now, 2 * DAY), reason="x"),
        payload("delete_connection", connector_id=deleted, created=_at(now, DAY)),
        # Only derived ids, a connection mended and a pause undone.
        payload("pause_connection", connector_id=derived, created=_at(now, 4 * DAY)),
        payload("resume_connector", connector_id=derived, created=_at(now, 3 * DAY)),
        payload("connection_successful", connector_id=derived, created=_at(now, 3 * DAY)),
        *sync(derived, None, 2 * DAY, "SUCCESSFUL"),
        _sync_body("sync_start", derived, None, _at(now, 2 * MINUTE), True),
    ]
