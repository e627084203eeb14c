"""The read API: ``/api/connectors``, their syncs and the decision; bearer tokens required."""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, jsonify, request

from fivetran_events import parse_criterion
from fivetran_events.decision import Criterion
from fivetran_events.model import is_valid_id
from fivetran_events.timeutil import parse_iso, to_ms

from .errors import ApiError
from .forwarding import attach_forwarding
from .state import state

bp = Blueprint("api", __name__, url_prefix="/api")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
MAX_LIMIT = 1000


@bp.before_request
def require_token() -> None:
    tokens = state().settings.api_tokens
    if not tokens:
        raise ApiError(403, "the read API is disabled: set FIVETRAN_EVENTS_API_TOKENS")
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise ApiError(
            401, "send 'Authorization: Bearer <token>'", headers={"WWW-Authenticate": "Bearer"}
        )
    given_b = given.strip().encode("utf-8", "replace")
    ok = False
    for token in tokens:
        ok |= hmac.compare_digest(token.encode(), given_b)
    if not ok:
        # RFC 6750: a token that does not authenticate is 401 with error="invalid_token";
        # 403 stays for "no token could ever pass" (none configured).
        raise ApiError(
            401,
            "the bearer token is not valid",
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )


def _bool(name: str, default: bool) -> bool:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ApiError(400, f"parameter '{name}' must be true or false", field=name)


def _time(name: str, required: bool = False) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        if required:
            raise ApiError(
                400,
                f"parameter '{name}' is required (ISO 8601, e.g. 2026-01-10T00:00:00Z)",
                field=name,
            )
        return None
    try:
        return to_ms(parse_iso(raw))
    except (ValueError, OverflowError):
        raise ApiError(
            400, f"parameter '{name}' must be an ISO 8601 timestamp", field=name
        ) from None


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
def connectors() -> Response:
    return jsonify({"connectors": state().reader.connectors()})


@bp.get("/connectors/<connector_id>/syncs")
def syncs(connector_id: str) -> Response:
    cid = _connector(connector_id)
    since, until = _time("since"), _time("until")
    raw_limit = request.args.get("limit", "100")
    try:
        limit = int(raw_limit)
    except ValueError:
        raise ApiError(400, "parameter 'limit' must be a whole number", field="limit") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(400, f"parameter 'limit' must be between 1 and {MAX_LIMIT}", field="limit")
    if since is not None and until is not None and since > until:
        raise ApiError(400, "parameter 'since' must not be after 'until'", field="since")
    rows = state().reader.syncs(cid, since, until, limit)
    attach_forwarding(state().enqueuer.store, cid, rows)  # the state per dataset URI
    return jsonify({"connector_id": cid, "syncs": rows})


@bp.get("/connectors/<connector_id>/decision")
def decision(connector_id: str) -> Response:
    cid = _connector(connector_id)
    target = _time("target", required=True)
    assert target is not None
    propagate = _bool("propagate_failures_forward", True)
    always_wait = _bool("always_wait_when_syncing", False)
    try:
        criterion = parse_criterion(request.args.get("criterion") or Criterion.ENDED_AFTER)
    except ValueError as exc:
        raise ApiError(400, f"parameter {exc}", field="criterion") from None
    result = state().reader.decide(
        cid,
        target,
        criterion=criterion,
        propagate_failures_forward=propagate,
        always_wait_when_syncing=always_wait,
    )
    body = result.to_dict()
    body["connector_id"] = cid
    return jsonify(body)
