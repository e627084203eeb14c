"""The read API: ``/api/connectors``, their syncs and the decision; bearer tokens required.

spectree builds ``/api/openapi.json`` from the pydantic models the views validate with,
so the document cannot drift from the code; its errors are ``errors.ApiError``.
"""

from __future__ import annotations

from typing import Annotated, Any

from flask import Blueprint, Flask, Response, jsonify
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema
from spectree import Response as SpecResponse
from spectree import SecurityScheme, SpecTree
from spectree.models import SecureType, SecuritySchemeData

from fivetran_events import Criterion, __version__
from fivetran_events.decision import FLAGS
from fivetran_events.model import is_valid_id
from fivetran_events.reconcile import fivetran_side
from fivetran_events.text import FLAG_WORDS, parse_flag
from fivetran_events.timeutil import parse_iso, to_ms

from .errors import ApiError, token_refusal
from .forwarding.store import attach_forwarding
from .state import state

MAX_LIMIT = 1000


def _epoch_ms(value: Any) -> Any:
    """Accept ISO 8601 text (naive means UTC) and keep epoch milliseconds."""
    if isinstance(value, str):
        try:
            return to_ms(parse_iso(value))
        except (ValueError, OverflowError):
            raise ValueError("must be an ISO 8601 timestamp, e.g. 2026-01-10T00:00:00Z") from None
    raise ValueError("must be an ISO 8601 timestamp")


def _flag(value: Any) -> Any:
    """Accept the usual spellings of a boolean, and only those (``2`` is a mistake)."""
    return value if isinstance(value, bool) else parse_flag(str(value), "the value")


#: A point in time given as ISO 8601 text; the view receives epoch milliseconds.
Timestamp = Annotated[
    int,
    BeforeValidator(_epoch_ms),
    WithJsonSchema(
        {
            "type": "string",
            "format": "date-time",
            "description": "ISO 8601 (a date alone means its midnight); naive means UTC",
            "example": "2026-01-10T00:00:00Z",
        }
    ),
]
Flag = Annotated[
    bool,
    BeforeValidator(_flag),
    WithJsonSchema({"type": "string", "enum": sorted(FLAG_WORDS)}),
]


class SyncsQuery(BaseModel):
    """Query of ``GET /api/connectors/{id}/syncs``."""

    model_config = ConfigDict(extra="ignore")
    since: Timestamp | None = None
    until: Timestamp | None = None
    limit: int = Field(100, ge=1, le=MAX_LIMIT)


class DecisionQuery(BaseModel):
    """Query of ``GET /api/connectors/{id}/decision``: decide's arguments."""

    model_config = ConfigDict(extra="ignore")
    target: Timestamp
    propagate_failures_forward: Flag = Field(True, json_schema_extra={"default": "true"})
    always_wait_when_syncing: Flag = Field(False, json_schema_extra={"default": "false"})
    wait_when_paused: Flag = Field(False, json_schema_extra={"default": "false"})
    wait_when_broken: Flag = Field(False, json_schema_extra={"default": "false"})
    criterion: Criterion = Criterion.ENDED_AFTER


class SyncFields(BaseModel):
    """What every listed sync says: Fivetran's words on it, and whether its id was derived."""

    sync_id: str
    sync_id_derived: bool = Field(
        False, description="the delivery had no sync_id: derived from connector and created"
    )
    status: str = Field(
        description="Fivetran's status verbatim, RUNNING or STALE (started, no end yet)"
    )
    started_at: str | None = None
    reason: str | None = Field(None, description="Fivetran's data.reason (failures and others)")
    task_type: str | None = Field(None, description="Fivetran's data.taskType")
    rescheduled_at: str | None = Field(
        None, description="Fivetran's data.rescheduledAt of a RESCHEDULED end"
    )
    source: str | None = Field(
        None,
        description="where the record came from when not from the webhook: imported "
        "(from Fivetran's LOG table, `fivetran-events import`) or reconciled (from "
        "Fivetran's REST API, `fivetran-events reconcile`: a completion the webhook never "
        "delivered)",
        json_schema_extra={"enum": ["imported", "reconciled", None]},
    )


class Completion(SyncFields):
    ended_at: str


class Running(SyncFields):
    ended_at: None = None


class DecidingSync(SyncFields):
    """The sync that decided: a completion, or the running sync (no end yet)."""

    ended_at: str | None


class Lifecycle(BaseModel):
    """What Fivetran's lifecycle events say of the connector now."""

    state: str = Field(
        json_schema_extra={"enum": ["active", "paused", "deleted"]},
        description="active unless a pause_connector or delete_connector is the latest word",
    )
    state_at: str | None
    state_event: str | None
    setup: str | None = Field(json_schema_extra={"enum": ["connected", "broken", None]})
    setup_at: str | None
    setup_reason: str | None


class Schedule(BaseModel):
    """``sync_frequency`` (minutes), ``daily_sync_time``, ``schedule_type``, ``paused``
    and ``status.setup_state`` from Fivetran's connection list, read at ``seen_at``."""

    sync_frequency: int | None
    daily_sync_time: str | None
    schedule_type: str | None
    paused: bool
    setup_state: str | None
    seen_at: str | None


class Connector(BaseModel):
    connector_id: str
    connector_name: str | None
    connector_type: str | None
    group_id: str | None
    last_event_at: str | None
    last_success: Completion | None
    last_failure: Completion | None
    running: Running | None
    lifecycle: Lifecycle
    schedule: Schedule | None = Field(
        None, description="Fivetran's schedule as the last reconcile read it (None: never)"
    )
    due_at: str | None = Field(
        None, description="when it is overdue without another success (None: no objective)"
    )
    overdue: bool = False
    overdue_seconds: int | None = Field(
        None, description="seconds past due_at, 0 when on time (None: no objective)"
    )


class InactiveWebhook(BaseModel):
    id: str
    type: str
    group_id: str | None
    url: str


class FivetranSide(BaseModel):
    """What the last reconcile found on Fivetran's side (absent before the first)."""

    reconciled_at: str | None = Field(None, description="when the last reconcile finished")
    inactive_webhooks: list[InactiveWebhook] = Field(
        default_factory=list,
        description="webhooks Fivetran reports inactive: it delivers nothing to them",
    )


class Connectors(BaseModel):
    connectors: list[Connector]
    fivetran: FivetranSide | None = None


class Forwarding(BaseModel):
    uri: str | None
    #: A partitioned asset event's key (FIVETRAN_EVENTS_PARTITION_GRAIN); None: the plain one.
    partition_key: str | None = None
    state: str
    attempts: int
    airflow_event_id: int | None
    reason: str | None


class Sync(SyncFields):
    ended_at: str | None
    forwarding: list[Forwarding] | None = None


class Syncs(BaseModel):
    connector_id: str
    syncs: list[Sync]


class DecisionOut(BaseModel):
    decision: str = Field(json_schema_extra={"enum": ["success", "fail", "wait"]})
    reason: str
    target: str
    sync: DecidingSync | None
    recheck_at: str | None = Field(
        None, description="when a wait is worth looking at again (a RESCHEDULED sync's time)"
    )
    connector_id: str


class Error(BaseModel):
    """Every error: what went wrong and, for a parameter, which one."""

    status: str = Field(json_schema_extra={"enum": ["error"]})
    error: str
    field: str | None = None


#: Answers every /api/* route can give besides its own.
ERRORS: dict[str, Any] = {f"HTTP_{code}": Error for code in (400, 401, 403, 503)}


def responses(ok: type[BaseModel], *, connector: bool = True) -> SpecResponse:
    """The documented answers of a route: ``ok`` for 200, the error body for the rest."""
    return SpecResponse(HTTP_200=ok, **ERRORS, **({"HTTP_404": Error} if connector else {}))


def _as_api_error(req: Any, resp: Any, err: Exception | None, *_: Any) -> None:
    """Raise the API's own 400 (not spectree's 422 list), naming the parameter at fault."""
    if not isinstance(err, ValidationError):
        return
    first = err.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else "query"
    if first["type"] == "missing":
        raise ApiError(400, f"parameter '{name}' is required", field=name)
    message = str(first["msg"]).removeprefix("Value error, ")
    raise ApiError(400, f"parameter '{name}': {message}", field=name)


spec = SpecTree(
    "flask",
    title="fivetran-events read API",
    version=__version__,
    # Not /api: spectree leaves out its own path's routes (init_app serves /api/openapi.json).
    path="apidoc",
    mode="strict",
    validation_error_status=400,
    validation_error_model=Error,
    before=_as_api_error,
    security_schemes=[
        SecurityScheme(
            name="bearer", data=SecuritySchemeData(type=SecureType.HTTP, scheme="bearer")
        )
    ],
    security={"bearer": []},
    annotations=True,
)


def init_app(app: Flask) -> None:
    """Serve the document at ``/api/openapi.json``, open to all (it holds no data)."""

    def openapi_json() -> Response:
        return jsonify(spec.spec)

    app.add_url_rule("/api/openapi.json", "openapi_json", openapi_json)


bp = Blueprint("api", __name__, url_prefix="/api")


@bp.before_request
def require_token() -> None:
    refusal = token_refusal(state().settings.api_tokens)
    if refusal is not None:
        raise refusal


def _connector(connector_id: str) -> str:
    if not is_valid_id(connector_id):
        raise ApiError(
            400,
            "connector id must be 1-128 characters of letters, digits, '_', '.' or '-'",
            field="connector_id",
        )
    if not state().reader.known(connector_id):
        raise ApiError(404, f"no events recorded for connector '{connector_id}'")
    return connector_id


@bp.get("/connectors")
@spec.validate(resp=responses(Connectors, connector=False), tags=["history"])
def connectors() -> Response:
    """List the recorded connectors: last success, last failure, running sync, lifecycle."""
    body: dict[str, Any] = {"connectors": state().reader.connectors()}
    side = fivetran_side(state().redis, state().settings.key_prefix)
    if side is not None:
        body["fivetran"] = side
    return jsonify(body)


@bp.get("/connectors/<connector_id>/syncs")
@spec.validate(query=SyncsQuery, resp=responses(Syncs), tags=["history"])
def syncs(connector_id: str, query: SyncsQuery) -> Response:
    """List a connector's syncs, newest first, with each success's forwarding state."""
    cid = _connector(connector_id)
    if query.since is not None and query.until is not None and query.since > query.until:
        raise ApiError(400, "parameter 'since' must not be after 'until'", field="since")
    rows = state().reader.syncs(cid, query.since, query.until, query.limit)
    attach_forwarding(state().enqueuer.store, cid, rows)  # the state per dataset URI
    return jsonify({"connector_id": cid, "syncs": rows})


@bp.get("/connectors/<connector_id>/decision")
@spec.validate(query=DecisionQuery, resp=responses(DecisionOut), tags=["history"])
def decision(connector_id: str, query: DecisionQuery) -> Response:
    """Decide whether the connector was synced as of ``target`` (the sensor's answer)."""
    cid = _connector(connector_id)
    result = state().reader.decide(cid, query.target, **query.model_dump(include=set(FLAGS)))
    body = result.to_dict()
    body["connector_id"] = cid
    return jsonify(body)
