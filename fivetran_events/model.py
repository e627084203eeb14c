"""Parse Fivetran webhook payloads into typed events (pure: no I/O).

What Fivetran really sends: ``connector_*`` or ``connection_*`` field names, ``group_id``
or ``destination_group_id``, ``data.status`` on ``sync_end``, ``test_event`` without a
``sync_id``, and event kinds added over time (accepted, ignored).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import Enum
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .exceptions import InvalidPayload
from .timeutil import iso, parse_iso, to_ms

#: Fivetran's ids are short words (``assimilate_seem``); we also keep ``:`` out of them,
#: which keeps every connector's Redis keys distinct (see keys.py).
ID_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
_ID_RE = re.compile(ID_PATTERN)

SUCCESS_STATUSES = frozenset({"SUCCESSFUL"})
FAILURE_STATUSES = frozenset({"FAILURE", "FAILURE_WITH_TASK", "FAILED"})
#: RESCHEDULED ends a sync that will run again: not a completion.
NON_COMPLETION_STATUSES = frozenset({"RESCHEDULED"})
SYNC_END_STATUSES = SUCCESS_STATUSES | FAILURE_STATUSES | NON_COMPLETION_STATUSES

RESYNC_EVENTS = frozenset({"resync_connector", "resync_table"})


class EventKind(str, Enum):
    SYNC_START = "sync_start"
    SYNC_END = "sync_end"
    TEST = "test_event"
    RESYNC = "resync"
    OTHER = "other"


def is_valid_id(value: str) -> bool:
    """Return whether ``value`` is an acceptable connector or sync id."""
    return isinstance(value, str) and _ID_RE.match(value) is not None


class _Data(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: str | None = Field(default=None, max_length=64)
    reason: str | None = Field(default=None, max_length=8192)
    taskType: str | None = Field(default=None, max_length=256)
    tables: list[str] | None = Field(default=None, max_length=10_000)

    @field_validator("reason", "taskType", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        # Fivetran documents these as text, but a reason is only ever shown to a human:
        # keep a structured one as JSON text rather than refuse the whole delivery.
        if value is None or isinstance(value, str):
            return value
        return json.dumps(value, sort_keys=True)[:8192]


class _Envelope(BaseModel):
    """The fields every recorded event needs, under their current names."""

    model_config = ConfigDict(extra="allow")

    event: str = Field(min_length=1, max_length=128)
    created: str = Field(min_length=1, max_length=64)
    connector_id: str = Field(pattern=ID_PATTERN)
    connector_name: str | None = Field(default=None, max_length=512)
    connector_type: str | None = Field(default=None, max_length=256)
    group_id: str | None = Field(default=None, max_length=256)
    sync_id: str | None = Field(default=None, pattern=ID_PATTERN)
    data: _Data = Field(default_factory=_Data)


@dataclass(frozen=True)
class Event:
    """A Fivetran event that passed validation."""

    kind: EventKind
    event: str
    created: datetime
    connector_id: str
    connector_name: str | None = None
    connector_type: str | None = None
    group_id: str | None = None
    sync_id: str | None = None
    status: str | None = None
    reason: str | None = None
    task_type: str | None = None
    tables: tuple[str, ...] = field(default_factory=tuple)

    @cached_property
    def created_ms(self) -> int:
        return to_ms(self.created)

    @property
    def is_success(self) -> bool:
        return self.kind is EventKind.SYNC_END and self.status in SUCCESS_STATUSES

    @property
    def is_failure(self) -> bool:
        return self.kind is EventKind.SYNC_END and self.status in FAILURE_STATUSES

    @cached_property
    def dedup_id(self) -> str:
        """Identify the delivery by its content, so a redelivery maps to the same id.

        The status is part of it: a retried sync can end FAILED and then SUCCESSFUL under
        one ``sync_id``, and both are real completions.
        """
        parts = (
            self.event,
            self.sync_id or "",
            str(self.created_ms),
            self.status or "",
            ",".join(self.tables),
        )
        return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=12).hexdigest()


def _rename(payload: dict[str, Any]) -> dict[str, Any]:
    """Map the newer ``connection_*`` and older ``destination_group_id`` names onto one set."""
    out = dict(payload)
    for new, old in (
        ("connection_id", "connector_id"),
        ("connection_name", "connector_name"),
        ("connection_type", "connector_type"),
    ):
        if old not in out and new in out:
            out[old] = out[new]
    if "group_id" not in out and "destination_group_id" in out:
        out["group_id"] = out["destination_group_id"]
    return out


def _first_error(exc: ValidationError) -> InvalidPayload:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "body"
    msg = err["msg"]
    if err["type"] == "missing":
        msg = "is required"
    elif err["type"] == "string_pattern_mismatch":
        msg = "must be 1-128 characters of letters, digits, '_', '.' or '-'"
    return InvalidPayload(f"field '{loc}' {msg}", field=loc)


def event_kind(name: str) -> EventKind:
    """Classify an event name."""
    if name == "sync_start":
        return EventKind.SYNC_START
    if name == "sync_end":
        return EventKind.SYNC_END
    if name == "test_event":
        return EventKind.TEST
    if name in RESYNC_EVENTS:
        return EventKind.RESYNC
    return EventKind.OTHER


def parse_event(body: bytes | str) -> Event:
    """Parse a raw webhook body; raise InvalidPayload naming the field at fault.

    Unknown event kinds come back with ``kind=OTHER`` after only the ``event`` field is
    checked: Fivetran adds events over time and they must not be refused.
    """
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidPayload("body is not valid JSON", field="body") from None
    if not isinstance(payload, dict):
        raise InvalidPayload("body must be a JSON object", field="body")
    name = payload.get("event")
    if not isinstance(name, str) or not name or len(name) > 128:
        raise InvalidPayload("field 'event' is required and must be a short string", field="event")
    kind = event_kind(name)
    if kind in (EventKind.OTHER, EventKind.TEST):
        # test_event must always get a 2xx (Fivetran refuses to create the webhook
        # otherwise), and unknown events are accepted as ignored: check nothing more.
        return Event(
            kind=kind,
            event=name,
            created=parse_iso("1970-01-01T00:00:00Z"),
            connector_id=str(payload.get("connector_id") or payload.get("connection_id") or "")[
                :128
            ],
        )
    try:
        env = _Envelope.model_validate(_rename(payload))
    except ValidationError as exc:
        raise _first_error(exc) from None
    try:
        created = parse_iso(env.created)
    except ValueError:
        raise InvalidPayload(
            "field 'created' must be an ISO 8601 timestamp", field="created"
        ) from None
    status = env.data.status
    if kind in (EventKind.SYNC_START, EventKind.SYNC_END) and env.sync_id is None:
        raise InvalidPayload("field 'sync_id' is required", field="sync_id")
    if kind is EventKind.SYNC_END:
        if status is None:
            raise InvalidPayload("field 'data.status' is required on sync_end", field="data.status")
        if status not in SYNC_END_STATUSES:
            allowed = ", ".join(sorted(SYNC_END_STATUSES))
            raise InvalidPayload(
                f"field 'data.status' must be one of {allowed}", field="data.status"
            )
    tables = tuple(env.data.tables or ())
    if any(not isinstance(t, str) or len(t) > 512 for t in tables):
        raise InvalidPayload(
            "field 'data.tables' must be a list of table names", field="data.tables"
        )
    return _refuse_unencodable(
        Event(
            kind=kind,
            event=name,
            created=created,
            connector_id=env.connector_id,
            connector_name=env.connector_name,
            connector_type=env.connector_type,
            group_id=env.group_id,
            sync_id=env.sync_id,
            status=status,
            reason=env.data.reason,
            task_type=env.data.taskType,
            tables=tables,
        )
    )


def check_not_future(event: Event, now_ms: int, max_skew_ms: int) -> None:
    """Raise InvalidPayload when ``event`` is dated more than ``max_skew_ms`` after ``now_ms``.

    Pure (the caller passes the clock). Fivetran dates events when they happen, so a
    ``created`` well ahead of the server's clock is a broken or forged clock; recorded,
    one success dated 2999 would count for every target until then.
    """
    if event.created_ms - now_ms > max_skew_ms:
        raise InvalidPayload(
            f"field 'created' ({iso(event.created_ms)}) is more than {max_skew_ms / 1000:g} s "
            f"ahead of the server's clock ({iso(now_ms)})",
            field="created",
        )


#: The payload's name of each Event field, for the 400's ``field``.
_PAYLOAD_FIELDS = {
    "reason": "data.reason",
    "task_type": "data.taskType",
    "tables": "data.tables",
    "status": "data.status",
}


def _refuse_unencodable(event: Event) -> Event:
    """Refuse text that no UTF-8 can carry, naming its field; return ``event``.

    JSON may escape a lone surrogate (``"\\ud800"``); the parser takes it, but the dedup
    hash and Redis cannot, and it used to end in a 500 (table names reached it).
    """
    for f in fields(event):
        value = getattr(event, f.name)
        for text in value if isinstance(value, tuple) else (value,):
            if isinstance(text, str):
                try:
                    text.encode()
                except UnicodeEncodeError:
                    name = _PAYLOAD_FIELDS.get(f.name, f.name)
                    raise InvalidPayload(
                        f"field '{name}' is not valid Unicode (a lone "
                        "surrogate escape such as \\ud800)",
                        field=name,
                    ) from None
    return event
