"""Verify and parse a Fivetran webhook delivery into a typed event (pure: no I/O).

What Fivetran really sends: ``connector_*`` or ``connection_*`` field names, ``group_id``
or ``destination_group_id``, ``data.status`` on ``sync_end``, ``test_event`` without a
``sync_id``, and event kinds added over time (accepted, ignored).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import Enum
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .exceptions import InvalidPayload
from .timeutil import is_time_text, iso, parse_iso, to_ms

#: HMAC-SHA256 of the raw body with the webhook's secret, sent as UPPER-case hex.
SIGNATURE_HEADER = "X-Fivetran-Signature-256"


def sign(body: bytes, secret: str) -> str:
    """Return the signature Fivetran would send for ``body``."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest().upper()


def verify(body: bytes, header: str | None, secrets: Iterable[str]) -> bool:
    """Whether ``header`` signs the raw ``body`` under any of ``secrets`` (several are
    valid while one is rotated), compared case-insensitively and in constant time."""
    if not header:
        return False
    given = header.strip().lower().encode("ascii", "replace")
    ok = False
    for secret in secrets:
        expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest().encode()
        # No early exit: the time taken does not tell which secret matched.
        ok |= hmac.compare_digest(expected, given)
    return ok


#: Fivetran's ids are short words (``assimilate_seem``); we also keep ``:`` out of them,
#: which keeps every connector's Redis keys distinct (see keys.py).
ID_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
_ID_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")

SUCCESS_STATUSES = frozenset({"SUCCESSFUL"})
FAILURE_STATUSES = frozenset({"FAILURE", "FAILURE_WITH_TASK", "FAILED"})
RESCHEDULED = "RESCHEDULED"
#: Statuses that end a sync without completing it: RESCHEDULED (it runs again at
#: ``data.rescheduledAt``) and CANCELED. An unknown status is taken the same way: recorded
#: verbatim, never refused (Fivetran adds values over time).
NON_COMPLETION_STATUSES = frozenset({RESCHEDULED, "CANCELED"})
KNOWN_STATUSES = SUCCESS_STATUSES | FAILURE_STATUSES | NON_COMPLETION_STATUSES

RESYNC_EVENTS = frozenset({"resync_connector", "resync_table"})

#: Lifecycle events as (group, value): ``state`` is whether it syncs at all, ``setup``
#: whether Fivetran could connect to its source, ``change`` only records an action.
LIFECYCLE_EVENTS: dict[str, tuple[str, str]] = {
    "create_connector": ("state", "active"),
    "resume_connector": ("state", "active"),
    "pause_connector": ("state", "paused"),
    "delete_connector": ("state", "deleted"),
    "connection_successful": ("setup", "connected"),
    "connection_failure": ("setup", "broken"),
    "edit_connector": ("change", "edit_connector"),
    "force_update_connector": ("change", "force_update_connector"),
}
#: Starts a derived sync id (of a sync event without one): no real id can hold it.
DERIVED_SYNC_MARK = "~"
#: Where a recorded sync came from, as the letter its completion member carries
#: (history/codec.py); ``R``: Fivetran's REST API (succeeded_at/failed_at, sync history).
SOURCE_WEBHOOK = ""
SOURCE_IMPORTED = "I"
SOURCE_RECONCILED = "R"
SOURCE_NAMES = {
    SOURCE_WEBHOOK: "webhook",
    SOURCE_IMPORTED: "imported",
    SOURCE_RECONCILED: "reconciled",
}


class EventKind(str, Enum):
    SYNC_START = "sync_start"
    SYNC_END = "sync_end"
    TEST = "test_event"
    #: A sample delivery of Fivetran's webhook test: answered 2xx, recorded nowhere.
    SAMPLE = "sample"
    RESYNC = "resync"
    LIFECYCLE = "lifecycle"
    OTHER = "other"


#: Kinds taken without checking more than their name, and recorded nowhere.
UNCHECKED_KINDS = frozenset({EventKind.OTHER, EventKind.TEST, EventKind.SAMPLE})


def is_valid_id(value: str) -> bool:
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def is_derived_sync_id(sync_id: str | None) -> bool:
    return sync_id is not None and sync_id.startswith(DERIVED_SYNC_MARK)


def lifecycle_name(name: str) -> str:
    """Spell a lifecycle event as ``*_connector``: Fivetran also names them ``*_connection``."""
    if name.endswith("_connection") and name not in ("connection_successful", "connection_failure"):
        return name.removesuffix("_connection") + "_connector"
    return name


class _Data(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: str | None = Field(default=None, min_length=1, max_length=64)
    reason: str | None = Field(default=None, max_length=8192)
    taskType: str | None = Field(default=None, max_length=256)
    rescheduledAt: str | None = Field(default=None, max_length=64)
    tables: list[str] | None = Field(default=None, max_length=10_000)

    @field_validator("reason", "taskType", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        # Documented as text, but only ever shown to a human: keep a structured one as
        # JSON rather than refuse the delivery.
        if value is None or isinstance(value, str):
            return value
        return json.dumps(value, sort_keys=True)[:8192]

    @field_validator("status", mode="before")
    @classmethod
    def _status_text(cls, value: Any) -> Any:
        # A status is kept verbatim whatever Fivetran adds; a number is still a value.
        return (
            str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
        )

    @field_validator("rescheduledAt", mode="before")
    @classmethod
    def _time_text(cls, value: Any) -> Any:
        # Only a hint of when to look again: a shape we cannot read is dropped.
        return value if isinstance(value, str) else None


class _Envelope(BaseModel):
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
    rescheduled_at_ms: int | None = None
    #: ``SOURCE_*``: not part of ``dedup_id`` (the same event read elsewhere is the same).
    source: str = SOURCE_WEBHOOK

    @cached_property
    def created_ms(self) -> int:
        return to_ms(self.created)

    @property
    def is_success(self) -> bool:
        return self.kind is EventKind.SYNC_END and self.status in SUCCESS_STATUSES

    @property
    def is_failure(self) -> bool:
        return self.kind is EventKind.SYNC_END and self.status in FAILURE_STATUSES

    @property
    def sync_id_derived(self) -> bool:
        return is_derived_sync_id(self.sync_id)

    @property
    def lifecycle(self) -> tuple[str, str] | None:
        if self.kind is not EventKind.LIFECYCLE:
            return None
        return LIFECYCLE_EVENTS[lifecycle_name(self.event)]

    @cached_property
    def dedup_id(self) -> str:
        """Identify the delivery by its content, so a redelivery maps to the same id. The
        status is in it: a retried sync can end FAILED, then SUCCESSFUL, under one id."""
        parts = (
            self.event,
            self.sync_id or "",
            str(self.created_ms),
            self.status or "",
            ",".join(self.tables),
        )
        return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=12).hexdigest()


def _rename(payload: dict[str, Any]) -> dict[str, Any]:
    """Map the newer ``connection_*`` and ``destination_group_id`` names onto one set."""
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
    if name == "sync_start":
        return EventKind.SYNC_START
    if name == "sync_end":
        return EventKind.SYNC_END
    if name == "test_event":
        return EventKind.TEST
    if name in RESYNC_EVENTS:
        return EventKind.RESYNC
    if lifecycle_name(name) in LIFECYCLE_EVENTS:
        return EventKind.LIFECYCLE
    return EventKind.OTHER


def _connector_field(payload: dict[str, Any]) -> str:
    value = payload.get("connector_id", payload.get("connection_id"))
    return value[:128] if isinstance(value, str) else ""


def is_sample(payload: dict[str, Any]) -> bool:
    """Whether ``payload`` is a sample of Fivetran's webhook test: a connector id that
    begins with ``_`` (real ids never do) or a ``created`` that is not a time."""
    if _connector_field(payload).startswith("_"):
        return True
    created = payload.get("created")
    return isinstance(created, str) and bool(created.strip()) and not is_time_text(created)


def derived_sync_id(connector_id: str, created_ms: int) -> str:
    """The sync id of a sync event that carried none: the same for a redelivery."""
    digest = hashlib.blake2b(f"{connector_id}\x1f{created_ms}".encode(), digest_size=8)
    return DERIVED_SYNC_MARK + digest.hexdigest()


def rescheduled_ms(status: str | None, text: object) -> int | None:
    """A RESCHEDULED end's ``data.rescheduledAt`` in epoch ms; None when it is not a time."""
    if status != RESCHEDULED or not isinstance(text, str) or not text or len(text) > 64:
        return None
    try:
        return to_ms(parse_iso(text))
    except (ValueError, OverflowError):
        return None


def parse_event(body: bytes | str) -> Event:
    """Parse a raw webhook body; raise InvalidPayload naming the field at fault. Nothing
    is refused for a value Fivetran added: unknown kinds come back as OTHER."""
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
    if kind is not EventKind.OTHER and kind is not EventKind.TEST and is_sample(payload):
        kind = EventKind.SAMPLE
    if kind in UNCHECKED_KINDS:
        # test_event must get a 2xx (else Fivetran refuses to create the webhook).
        return Event(
            kind=kind,
            event=name,
            created=parse_iso("1970-01-01T00:00:00Z"),
            connector_id=_connector_field(payload),
        )
    try:
        env = _Envelope.model_validate(_rename(payload))
    except ValidationError as exc:
        raise _first_error(exc) from None
    try:
        created = parse_iso(env.created)
    except ValueError:  # out of range (year 9999 at -14:00); not a time at all: a sample
        msg = "field 'created' must be an ISO 8601 timestamp"
        raise InvalidPayload(msg, field="created") from None
    status = env.data.status
    sync_id = env.sync_id
    if kind in (EventKind.SYNC_START, EventKind.SYNC_END) and sync_id is None:
        sync_id = derived_sync_id(env.connector_id, to_ms(created))
    if kind is EventKind.SYNC_END and status is None:
        raise InvalidPayload("field 'data.status' is required on sync_end", field="data.status")
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
            sync_id=sync_id,
            status=status,
            reason=env.data.reason,
            task_type=env.data.taskType,
            tables=tables,
            rescheduled_at_ms=rescheduled_ms(status, env.data.rescheduledAt),
        )
    )


def check_not_future(event: Event, now_ms: int, max_skew_ms: int) -> None:
    """Raise InvalidPayload when ``event`` is dated more than ``max_skew_ms`` after
    ``now_ms``: recorded, one success dated 2999 would count for every target."""
    if event.created_ms - now_ms > max_skew_ms:
        raise InvalidPayload(
            f"field 'created' ({iso(event.created_ms)}) is more than {max_skew_ms / 1000:g} s "
            f"ahead of the server's clock ({iso(now_ms)})",
            field="created",
        )


_PAYLOAD_FIELDS = {
    "reason": "data.reason",
    "task_type": "data.taskType",
    "tables": "data.tables",
    "status": "data.status",
}


def _refuse_unencodable(event: Event) -> Event:
    """Refuse a lone surrogate escape (``"\\ud800"``), which JSON takes but UTF-8 cannot
    carry: a 400 naming the field, never a 500; return ``event``."""
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
