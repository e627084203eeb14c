"""The read API: ``/api/connectors``, their syncs and the decision; bearer tokens required.

Query parameters are validated by the models in ``openapi.py``, which also generate
``/api/openapi.json``.
"""

from __future__ import annotations

import hmac
from typing import Any

from flask import Blueprint, Response, jsonify, request

from fivetran_events.decision import FLAGS
from fivetran_events.model import is_valid_id
from fivetran_events.reconcile import fivetran_side

from .errors import ApiError
from .forwarding import attach_forwarding
from .openapi import Connectors, DecisionOut, DecisionQuery, Syncs, SyncsQuery, responses, spec
from .state import state

bp = Blueprint("api", __name__, url_prefix="/api")


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
