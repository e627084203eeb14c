"""Liveness, readiness and metrics."""

from __future__ import annotations

import redis
from flask import Blueprint, Response, jsonify

from fivetran_events.keys import readiness_key
from fivetran_events.reconcile import fivetran_side
from fivetran_events.timeutil import now_ms

from . import metrics
from .errors import ApiError, redis_refusal
from .gauges import RedisGauges
from .state import State, state
from .webhook import missing_replicas

bp = Blueprint("health", __name__)

#: Life of the readiness probe's key: it never accumulates, yet shows up in a MONITOR.
PROBE_TTL_MS = 60_000


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz() -> Response:
    """Ready means Redis takes a write: a replica, a full memory or a failed save answer
    PING but refuse every delivery, so a PING would keep sending Fivetran here."""
    reason = write_refusal(state())
    if reason == "unreachable":
        raise ApiError(503, "not ready: Redis is unreachable")
    if reason is not None:
        raise ApiError(503, f"not ready: Redis refuses writes ({reason})")
    short = missing_replicas(state())  # FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS
    if short is not None:
        raise ApiError(503, f"not ready: a write was taken, but {short}")
    body: dict[str, object] = {"status": "ready"}
    # What the last reconcile found (read from Redis, never from Fivetran per call): an
    # inactive webhook does not make this server unready, it is why nothing arrives.
    try:
        side = fivetran_side(state().redis, state().settings.key_prefix)
    except redis.RedisError:  # Redis took the probe's write: readiness is decided
        side = None
    if side is not None:
        body["fivetran"] = side
    return jsonify(body)


def write_refusal(st: State) -> str | None:
    """Write the probe key; return why Redis refused (``errors.redis_refusal``), or None.

    Errors that are not a refusal are raised: they are bugs, not an unready Redis. The
    message never carries Redis's address, which /readyz would otherwise show anyone.
    """
    try:
        st.redis.set(readiness_key(st.settings.key_prefix), now_ms(), px=PROBE_TTL_MS)
    except redis.RedisError as exc:
        reason = redis_refusal(exc)
        if reason is None:
            raise
        return reason
    return None


@bp.get("/metrics")
def prometheus() -> Response:
    st = state()
    body, content_type = metrics.render(RedisGauges(st.redis, st.settings.key_prefix))
    return Response(body, content_type=content_type)
