"""Liveness, readiness and metrics."""

from __future__ import annotations

import redis
from flask import Blueprint, Response, jsonify

from . import metrics
from .errors import ApiError
from .gauges import RedisGauges
from .state import state

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz() -> Response:
    try:
        state().redis.ping()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise ApiError(503, f"Redis is unreachable: {exc}") from None
    return jsonify({"status": "ready"})


@bp.get("/metrics")
def prometheus() -> Response:
    st = state()
    body, content_type = metrics.render(RedisGauges(st.redis, st.settings.key_prefix))
    return Response(body, content_type=content_type)
