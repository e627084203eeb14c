"""The probes: ``/healthz``, ``/readyz`` (would a delivery be taken and kept now?),
``/metrics``, the facet schemas at ``/schemas/<name>``, and the replica checks
(``FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS``: a delivery on the primary alone is lost if
Sentinel promotes a replica that never had it). Probes answer anyone, so they name no
connector, group or webhook unless the request bears a read-API token."""

from __future__ import annotations

import logging
from pathlib import Path

import redis
from flask import Blueprint, Response, jsonify, send_from_directory

from fivetran_events import Event, WriteStatus
from fivetran_events.keys import ConnectorKeys, readiness_key
from fivetran_events.reconcile import fivetran_side
from fivetran_events.redis_url import eviction_risk
from fivetran_events.timeutil import now_ms

from . import metrics
from .errors import ApiError, redis_refusal, token_refusal
from .state import State, state

bp = Blueprint("probes", __name__)
log = logging.getLogger(__name__)

#: The schemas /schemas/<name> serves (package data): public documentation, no token.
SCHEMAS = Path(__file__).parent / "schemas"

#: Life of the readiness key (/readyz, before WAIT): it never accumulates, yet shows in MONITOR.
PROBE_TTL_MS = 60_000


def authenticated(st: State) -> bool:
    """Whether the request bears a read-API token (a probe without is answered, with less)."""
    return bool(st.settings.api_tokens) and token_refusal(st.settings.api_tokens) is None


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz() -> Response:
    """Ready means Redis takes a write and keeps it: a replica, a full memory or a failed save
    answer PING but refuse every delivery; a Redis that may evict keys loses what it took."""
    st = state()
    reason = write_refusal(st)
    if reason == "unreachable":
        raise ApiError(503, "not ready: Redis is unreachable")
    if reason is not None:
        raise ApiError(503, f"not ready: Redis refuses writes ({reason})")
    risk = eviction_refusal(st)
    if risk is not None:
        raise ApiError(503, f"not ready: {risk}")
    short = missing_replicas(st)
    if short is not None:
        raise ApiError(503, f"not ready: a write was taken, but {short}")
    body: dict[str, object] = {"status": "ready"}
    # What the last reconcile found (read from Redis, never from Fivetran per call): an
    # inactive webhook does not make this server unready, it is why nothing arrives.
    try:
        side = fivetran_side(st.redis, st.settings.key_prefix)
    except redis.RedisError:  # Redis took the probe's write: readiness is decided
        side = None
    if side is not None:
        side["inactive_webhook_count"] = len(side["inactive_webhooks"])
        if not authenticated(st):  # webhooks name groups and URLs: only their number
            del side["inactive_webhooks"]
        body["fivetran"] = side
    return jsonify(body)


def write_refusal(st: State) -> str | None:
    """Write the probe key; return why Redis refused (``redis_refusal``), or None; other
    errors are raised. The reason never carries Redis's address, which /readyz shows."""
    try:
        st.redis.set(readiness_key(st.settings.key_prefix), now_ms(), px=PROBE_TTL_MS)
    except redis.RedisError as exc:
        reason = redis_refusal(exc)
        if reason is None:
            raise
        return reason
    return None


def eviction_refusal(st: State) -> str | None:
    """Why Redis may drop what it took, or None; a Redis denying ``INFO`` is not judged."""
    try:
        return eviction_risk(st.redis)
    except redis.ResponseError as exc:
        log.warning("cannot read Redis's maxmemory-policy (INFO memory): %s", exc)
        return None


def confirm_replicas(st: State, event: Event, status: WriteStatus) -> None:
    """Return once enough replicas hold the delivery just handled (a duplicate's too: its
    first delivery may have been answered 503); raise 503 otherwise."""
    if status is WriteStatus.IGNORED or st.settings.redis_wait_replicas == 0:
        return  # the common case: nothing to build on the webhook's path
    seen = (ConnectorKeys(st.settings.key_prefix, event.connector_id).seen, event.dedup_id)
    short = missing_replicas(st, seen)
    if short is not None:
        raise ApiError(503, f"recorded, but {short}; retry later")


def missing_replicas(st: State, seen: tuple[str, str] | None = None) -> str | None:
    """Write a marker and WAIT for it; say how many replicas fell short, or None. WAIT counts
    its own connection's writes, so a marker goes first (a replica holding it holds every write
    before); ``seen`` is read on that connection: a new primary after a failover may lack it."""
    wanted = st.settings.redis_wait_replicas
    if wanted == 0:
        return None
    timeout_ms = st.settings.redis_wait_timeout_ms
    pipe = st.redis.pipeline(transaction=False)
    if seen is not None:
        pipe.zscore(*seen)
    pipe.set(readiness_key(st.settings.key_prefix), now_ms(), px=PROBE_TTL_MS)
    pipe.wait(wanted, timeout_ms)
    replies = pipe.execute()
    if seen is not None and replies[0] is None:
        return "the Redis primary answering now does not hold it (a failover?)"
    confirmed = int(replies[-1])
    if confirmed >= wanted:
        return None
    return (
        f"only {confirmed} of {wanted} Redis replicas confirmed it within {timeout_ms} ms "
        "(FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS)"
    )


@bp.get("/metrics")
def prometheus() -> Response:
    st = state()
    gauges = metrics.RedisGauges(st.redis, st.settings.key_prefix, freshness=st.reader.freshness)
    body, content_type = metrics.render(gauges, named=authenticated(st))
    return Response(body, content_type=content_type)


@bp.get("/schemas/<name>")
def schema(name: str) -> Response:
    """A JSON schema by its file name (forwarding/lineage.py's FACET_SCHEMA_PATH); an
    unknown name, or one that leaves the folder, is a 404."""
    return send_from_directory(SCHEMAS, name, mimetype="application/schema+json")
