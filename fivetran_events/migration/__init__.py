"""Migrate a history from key layout v1 (``{p}c:{c}:*``) to the current one, online.

The migration knows v1 and nothing of the current layout: it replays each connector's v1
history as events through ``HistoryWriter.record`` (no forwarding hook, so nothing goes
to Airflow again). ``record`` is idempotent on content and its result does not depend on
arrival order, so the webhook may record new events of the same connector meanwhile,
and a run that was killed is simply run again: a connector's v1 keys are deleted only
after all its events are recorded, in a transaction that watches them (a 0.1 webhook
still writing v1 during a rolling upgrade makes that connector replay again, it never
loses an event).

Before it changes anything it scans the prefix and refuses (``UnknownKeys``) when a key
is neither v1 history, nor the current layout's (``{p}h:*``), nor a key both layouts
share: a wrong prefix or another application's keys must not be taken for history.
"""

from __future__ import annotations

from ..keys import layout_key, v1_key
from ..keys import migration_done_key as done_key
from .replay import V1Rows, v1_events
from .run import Migration, Plan, Progress
from .scan import (
    LAYOUT_VERSION,
    KeyKind,
    Scan,
    UnknownKeys,
    UnreadableV1,
    classify,
    scan_prefix,
)

__all__ = [
    "LAYOUT_VERSION",
    "KeyKind",
    "Migration",
    "Plan",
    "Progress",
    "Scan",
    "UnknownKeys",
    "UnreadableV1",
    "V1Rows",
    "classify",
    "done_key",
    "layout_key",
    "scan_prefix",
    "v1_events",
    "v1_key",
]
