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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import Enum
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .exceptions import InvalidPayload
from .timeutil import is_time_text, iso, parse_iso, to_ms

#: HMAC-SHA256 of the raw body with the webhook's secret, sent as UPPER-case hex.
SIGNATURE_HEADER = "X-Fivetran-Signature-256"


def sign(body: bytes, secret: str) -> str:
    """Return the signature Fivetran would send for ``body``."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest().upper()


def verify(body: bytes, header: str | None, secrets: Iterable[str]) -> bool:
    """Whether ``header`` signs ``body`` under any of ``secrets`` (several in a rotation)."""
    if not header:
        return False
    given = header.strip().lower().encode("ascii", "replace")
    ok = False
    for secret in secrets:
        expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest().encode()
        # No early exit: the time taken does not tell which secret matched.
        ok |= hmac.compare_digest(expected, given)
    return ok


#: Fivetran's ids are short words (``assimilate_seem``), here without ``:`` (see keys.py).
ID_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
_ID_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")

SUCCESS_STATUSES = frozenset({"SUCCESSFUL"})
FAILURE_STATUSES = frozenset({"FAILURE", "FAILURE_WITH_TASK", "FAILED"})
RESCHEDULED = "RESCHEDULED"
#: End a sync without completing it, as an unknown status does (kept: Fivetran adds values).
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
#: Where a recorded sync came from, the letter its completion member carries (codec.py).
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


#: The longest text kept of each optional text field: a longer one is cut, not refused.
TEXT_LIMITS = {"reason": 8192, "taskType": 256, "connector_name": 512, "connector_type": 256}
#: The most table names a resync's ``data.tables`` keeps, and the longest name.
MAX_TABLES = 10_000
MAX_TABLE_NAME = 512


def _storable(text: str) -> bool:
    """Whether UTF-8 (so Redis) can carry ``text``: JSON takes a lone surrogate ("\\ud800")."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def optional_text(value: Any, name: str) -> str | None:
    """An optional text field as kept, cut to its limit (``reason``, ``taskType``: as JSON)."""
    if not isinstance(value, str):
        if not isinstance(value, dict | list) or name not in ("reason", "taskType"):
            return None
        value = json.dumps(value, sort_keys=True)
    return value[: TEXT_LIMITS[name]] if _storable(value) else None


@dataclass(frozen=True)
class EventData:
    """What the history keeps of a delivery's ``data``, and the optional fields dropped."""

    status: str | None = None
    reason: str | None = None
    task_type: str | None = None
    rescheduled_at_ms: int | None = None
    tables: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()


def _status(value: Any) -> str | None:
    # Kept verbatim whatever Fivetran adds; a number is still a value.
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    ok = isinstance(value, str) and 0 < len(value) <= 64 and _storable(value)
    return value if ok else None


def _tables(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or len(value) > MAX_TABLES:
        return None
    ok = all(isinstance(t, str) and len(t) <= MAX_TABLE_NAME and _storable(t) for t in value)
    return tuple(value) if ok else None


#: How each field of ``data`` the history keeps is read: None for a shape it cannot keep.
_DATA_FIELDS: dict[str, Callable[[Any], Any]] = {
    "status": _status,
    "reason": lambda v: optional_text(v, "reason"),
    "taskType": lambda v: optional_text(v, "taskType"),
    # Only a hint of when to look again.
    "rescheduledAt": lambda v: v if isinstance(v, str) else None,
    "tables": _tables,
}


def event_data(kind: EventKind, data: Any) -> EventData:
    """Read a delivery's ``data``. A field of a shape nobody documents (``tables`` as an
    object, ``data`` as a list) is dropped and named in ``dropped``: only ids, ``created``
    and a ``sync_end``'s status refuse a delivery, since Fivetran retries a refused one for
    24 hours, then disables the webhook (fivetran.com/docs/rest-api/getting-started/webhooks)."""
    dropped = [] if isinstance(data, dict) or data is None else ["data"]
    data = data if isinstance(data, dict) else {}
    kept: dict[str, Any] = {}
    for name, read in _DATA_FIELDS.items():
        value = data.get(name)
        kept[name] = None if value is None else read(value)
        if value is not None and kept[name] is None:
            dropped.append(f"data.{name}")
    status = kept["status"]
    if kind is EventKind.SYNC_END and status is None:  # what the history needs
        what = (
            "is required on sync_end"
            if data.get("status") is None
            else "must be 1-64 characters of text"
        )
        raise InvalidPayload(f"field 'data.status' {what}", field="data.status")
    return EventData(
        status=status,
        reason=kept["reason"],
        task_type=kept["taskType"],
        rescheduled_at_ms=rescheduled_ms(status, kept["rescheduledAt"]),
        tables=kept["tables"] or (),
        dropped=tuple(dropped),
    )


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="allow")

    event: str = Field(min_length=1, max_length=128)
    created: str = Field(min_length=1, max_length=64)
    connector_id: str = Field(pattern=ID_PATTERN)
    group_id: str | None = Field(default=None, max_length=256)
    sync_id: str | None = Field(default=None, pattern=ID_PATTERN)


@dataclass(frozen=True)
class Event:
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
    #: The optional fields left out for their shape (``data.tables``, ``connector_name``).
    dropped: tuple[str, ...] = ()

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
        """The delivery's content id, with its status: a retried sync can end FAILED, then OK."""
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
    if name in ("sync_start", "sync_end", "test_event"):
        return EventKind(name)
    if name in RESYNC_EVENTS:
        return EventKind.RESYNC
    if lifecycle_name(name) in LIFECYCLE_EVENTS:
        return EventKind.LIFECYCLE
    return EventKind.OTHER


def _connector_field(payload: dict[str, Any]) -> str:
    value = payload.get("connector_id", payload.get("connection_id"))
    return value[:128] if isinstance(value, str) else ""


def is_sample(payload: dict[str, Any]) -> bool:
    """Whether ``payload`` is a webhook test's sample: a ``_`` id or a ``created`` not a time."""
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
    """Parse a webhook body (unknown kinds: OTHER); raise InvalidPayload naming the field."""
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
        env = _Envelope.model_validate(renamed := _rename(payload))
    except ValidationError as exc:
        raise _first_error(exc) from None
    try:
        created = parse_iso(env.created)
    except ValueError:  # out of range (year 9999 at -14:00); not a time at all: a sample
        msg = "field 'created' must be an ISO 8601 timestamp"
        raise InvalidPayload(msg, field="created") from None
    sync_id = env.sync_id
    if kind in (EventKind.SYNC_START, EventKind.SYNC_END) and sync_id is None:
        sync_id = derived_sync_id(env.connector_id, to_ms(created))
    data = event_data(kind, payload.get("data"))
    names = {n: optional_text(renamed.get(n), n) for n in ("connector_name", "connector_type")}
    odd = tuple(n for n, v in names.items() if v is None and renamed.get(n) is not None)
    return _refuse_unencodable(
        Event(
            kind=kind,
            event=name,
            created=created,
            connector_id=env.connector_id,
            connector_name=names["connector_name"],
            connector_type=names["connector_type"],
            group_id=env.group_id,
            sync_id=sync_id,
            status=data.status,
            reason=data.reason,
            task_type=data.task_type,
            tables=data.tables,
            rescheduled_at_ms=data.rescheduled_at_ms,
            dropped=odd + data.dropped,
        )
    )


def check_not_future(event: Event, now_ms: int, max_skew_ms: int) -> None:
    """Refuse an event dated past ``now_ms + max_skew_ms``: it would count for every target."""
    if event.created_ms - now_ms > max_skew_ms:
        raise InvalidPayload(
            f"field 'created' ({iso(event.created_ms)}) is more than {max_skew_ms / 1000:g} s "
            f"ahead of the server's clock ({iso(now_ms)})",
            field="created",
        )


def _refuse_unencodable(event: Event) -> Event:
    """Refuse a lone surrogate (``"\\ud800"``) in a kept field: UTF-8 cannot carry it (a 400)."""
    for f in fields(event):
        value = getattr(event, f.name)
        if isinstance(value, str) and not _storable(value):
            raise InvalidPayload(
                f"field '{f.name}' is not valid Unicode (a lone surrogate escape such as \\ud800)",
                field=f.name,
            )
    return event
