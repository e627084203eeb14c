"""What Fivetran's REST API answers, as ``FivetranClient`` returns it: connections,
groups, webhooks and a webhook test, each read leniently (a field of an unexpected type
is None; a connection keeps the whole object in ``raw``); ``describe`` gives ``--json``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .timeutil import iso, parse_iso


def text_field(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_iso(value)
    except (ValueError, OverflowError):
        return None


@dataclass(frozen=True)
class Connection:
    """A connection (formerly "connector"); ``raw`` keeps the whole object."""

    id: str
    group_id: str | None
    service: str | None
    schema: str | None
    paused: bool
    succeeded_at: datetime | None
    failed_at: datetime | None
    sync_state: str | None
    setup_state: str | None
    update_state: str | None
    is_historical_sync: bool
    schedule_type: str | None
    sync_frequency: int | None
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    #: With ``sync_state`` ``rescheduled``: when the sync is due again (``status.rescheduled_for``).
    rescheduled_for: datetime | None = None
    #: ``HH:MM``, when a daily (1440-minute) connection starts its sync.
    daily_sync_time: str | None = None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Connection:
        status = body.get("status")
        status = status if isinstance(status, Mapping) else {}
        frequency = body.get("sync_frequency")
        return cls(
            id=str(body.get("id", "")),
            group_id=text_field(body.get("group_id")),
            service=text_field(body.get("service")),
            schema=text_field(body.get("schema")),
            paused=body.get("paused") is True,
            succeeded_at=_time(body.get("succeeded_at")),
            failed_at=_time(body.get("failed_at")),
            sync_state=text_field(status.get("sync_state")),
            setup_state=text_field(status.get("setup_state")),
            update_state=text_field(status.get("update_state")),
            is_historical_sync=status.get("is_historical_sync") is True,
            schedule_type=text_field(body.get("schedule_type")),
            sync_frequency=frequency if isinstance(frequency, int) else None,
            raw=body,
            rescheduled_for=_time(status.get("rescheduled_for")),
            daily_sync_time=text_field(body.get("daily_sync_time")),
        )


@dataclass(frozen=True)
class SyncRecord:
    """One sync of a connection's sync history (``end`` None while it runs)."""

    sync_id: str | None
    started_at: datetime | None
    ended_at: datetime | None
    status: str | None
    reason: str | None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> SyncRecord:
        return cls(
            sync_id=text_field(body.get("sync_id")),
            started_at=_time(body.get("start_time")),
            ended_at=_time(body.get("end_time")),
            status=text_field(body.get("status")),
            reason=text_field(body.get("reason")),
        )


@dataclass(frozen=True)
class Group:
    id: str
    name: str | None
    created_at: datetime | None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Group:
        return cls(
            id=str(body.get("id", "")),
            name=text_field(body.get("name")),
            created_at=_time(body.get("created_at")),
        )


@dataclass(frozen=True)
class Webhook:
    """A webhook as Fivetran reports it; its secret is never given back (``******``)."""

    id: str
    type: str
    group_id: str | None
    url: str
    events: tuple[str, ...]
    active: bool
    created_at: datetime | None
    created_by: str | None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Webhook:
        events = body.get("events")
        return cls(
            id=str(body.get("id", "")),
            type=text_field(body.get("type")) or "",
            group_id=text_field(body.get("group_id")),
            url=text_field(body.get("url")) or "",
            events=tuple(e for e in events if isinstance(e, str))
            if isinstance(events, list)
            else (),
            active=body.get("active") is True,
            created_at=_time(body.get("created_at")),
            created_by=text_field(body.get("created_by")),
        )


@dataclass(frozen=True)
class WebhookTest:
    """What Fivetran's webhook test reports."""

    succeed: bool
    status: int | None
    message: str | None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> WebhookTest:
        status = body.get("status")
        return cls(
            succeed=body.get("succeed") is True,
            status=status if isinstance(status, int) else None,
            message=text_field(body.get("message")),
        )


@dataclass(frozen=True)
class Destination:
    """A destination (its id is its group's): its kind (``service``) and ``config``."""

    id: str
    group_id: str | None
    service: str | None
    config: Mapping[str, Any] = field(compare=False)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Destination:
        config = body.get("config")
        return cls(
            id=str(body.get("id", "")),
            group_id=text_field(body.get("group_id")),
            service=text_field(body.get("service")),
            config=config if isinstance(config, Mapping) else {},
        )


def enabled_tables(schema_config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The sorted (schema, table) destination names of the enabled tables."""
    out: set[tuple[str, str]] = set()
    schemas = schema_config.get("schemas")
    for sname, schema in (schemas or {}).items() if isinstance(schemas, Mapping) else ():
        if not isinstance(schema, Mapping) or schema.get("enabled") is False:
            continue
        in_dest = text_field(schema.get("name_in_destination")) or str(sname)
        tables = schema.get("tables")
        for tname, table in (tables or {}).items() if isinstance(tables, Mapping) else ():
            if isinstance(table, Mapping) and table.get("enabled") is not False:
                out.add((in_dest, text_field(table.get("name_in_destination")) or str(tname)))
    return sorted(out)


def describe(value: object) -> Any:
    """A record as plain JSON values, for ``--json``."""
    if isinstance(value, (Connection, Group, Webhook, WebhookTest, Destination)):
        return {
            k: describe(v)
            for k, v in vars(value).items()
            if k != "raw"  # the whole object again; callers that need it read .raw
        }
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    return value
