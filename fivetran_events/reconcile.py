"""Reconcile the history against Fivetran's REST API: completions the webhook never delivered.

Each connection's ``succeeded_at``/``failed_at`` is recorded as a ``sync_end`` marked
``SOURCE_RECONCILED``, with a derived sync id. The record script takes an end of that
status from another source within _lua.SAME_SYNC_WINDOW_MS as the same completion,
whichever came first, so a run twice records nothing new. Fivetran reports only the
latest completion of each status: older gaps are the LOG import's (log_import.py). The
webhooks Fivetran reports inactive are stored with the outcome, for /readyz.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import redis

from .history.writer import OnSuccess, WriteStatus, record_many
from .keys import reconcile_key
from .model import SOURCE_RECONCILED, Event, EventKind, derived_sync_id, is_valid_id
from .redis_url import as_text
from .timeutil import iso, now_ms, to_ms

if TYPE_CHECKING:  # the web process reads the outcome without loading an HTTP client
    from .fivetran_api import FivetranClient
    from .fivetran_records import Connection, Webhook

log = logging.getLogger(__name__)

#: After a day of missed runs /readyz says "never ran".
OUTCOME_TTL_S = 24 * 3600


def completions_of(connections: Iterable[Connection]) -> Iterator[Event]:
    """The completions Fivetran reports, as reconciled ``sync_end`` events, oldest first
    per connection (a connection whose id the history cannot hold is left out)."""
    for c in connections:
        if not is_valid_id(c.id) or c.id.startswith("_"):
            continue
        ends: list[tuple[datetime, str]] = [
            (at, status)
            for at, status in ((c.succeeded_at, "SUCCESSFUL"), (c.failed_at, "FAILURE"))
            if at is not None
        ]
        for at, status in sorted(ends):
            yield Event(
                kind=EventKind.SYNC_END,
                event="sync_end",
                created=at,
                connector_id=c.id,
                connector_type=c.service,
                group_id=c.group_id,
                sync_id=derived_sync_id(c.id, to_ms(at)),
                status=status,
                source=SOURCE_RECONCILED,
            )


@dataclass
class Outcome:
    started_ms: int
    finished_ms: int = 0
    connections: int = 0
    recorded: list[Event] = field(default_factory=list)
    known: int = 0
    #: Older than the retention, or dated in the future.
    skipped: int = 0
    inactive_webhooks: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "started_at": iso(self.started_ms),
            "finished_at": iso(self.finished_ms),
            "connections": self.connections,
            "recorded": len(self.recorded),
            "known": self.known,
            "skipped": self.skipped,
            "reconciled": [
                {
                    "connector_id": e.connector_id,
                    "sync_id": e.sync_id,
                    "status": e.status,
                    "ended_at": iso(e.created_ms),
                }
                for e in self.recorded
            ],
            "inactive_webhooks": self.inactive_webhooks,
        }


def _webhook_dict(w: Webhook) -> dict[str, Any]:
    return {"id": w.id, "type": w.type, "group_id": w.group_id, "url": w.url}


def record_completions(
    client: redis.Redis,
    prefix: str,
    retention_ms: int,
    max_clock_skew_ms: int,
    events: Sequence[Event],
    outcome: Outcome,
    on_success: OnSuccess | None = None,
    now: int | None = None,
) -> Outcome:
    """Record ``events`` as the webhook would have, counting in ``outcome``."""
    now = now_ms() if now is None else now
    dated = [e for e in events if e.created_ms - now <= max_clock_skew_ms]
    outcome.skipped += len(events) - len(dated)
    for event, status in record_many(
        client, prefix, dated, retention_ms, now=now, on_success=on_success
    ):
        if status is WriteStatus.RECORDED:
            outcome.recorded.append(event)
        elif status is WriteStatus.DUPLICATE:
            outcome.known += 1
        else:
            outcome.skipped += 1
    return outcome


def reconcile(
    client: redis.Redis,
    fivetran: FivetranClient,
    prefix: str,
    retention_ms: int,
    max_clock_skew_ms: int,
    on_success: OnSuccess | None = None,
) -> Outcome:
    """One run: record what the history lacks and store the outcome; Fivetran's errors
    are raised before anything is written."""
    outcome = Outcome(started_ms=now_ms())
    connections = fivetran.connections()
    webhooks = fivetran.webhooks()
    outcome.connections = len(connections)
    outcome.inactive_webhooks = [_webhook_dict(w) for w in webhooks if not w.active]
    record_completions(
        client,
        prefix,
        retention_ms,
        max_clock_skew_ms,
        list(completions_of(connections)),
        outcome,
        on_success,
    )
    outcome.finished_ms = now_ms()
    stored = {k: v for k, v in outcome.to_dict().items() if k != "reconciled"}
    client.set(reconcile_key(prefix), json.dumps(stored), ex=OUTCOME_TTL_S)
    return outcome


def last_outcome(client: redis.Redis, prefix: str) -> Mapping[str, Any] | None:
    raw = client.get(reconcile_key(prefix))
    if raw is None:
        return None
    try:
        value = json.loads(as_text(raw))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def fivetran_side(client: redis.Redis, prefix: str) -> dict[str, Any] | None:
    """What /readyz and the connectors listings show of the last run (None: none)."""
    last = last_outcome(client, prefix)
    if last is None:
        return None
    hooks = last.get("inactive_webhooks")
    return {
        "reconciled_at": last.get("finished_at"),
        "inactive_webhooks": hooks if isinstance(hooks, list) else [],
    }
