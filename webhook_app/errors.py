"""The web program's errors and their handlers, each answered ``{"status": "error", ...}``:
a client's mistake is an ``ApiError`` (a 4xx naming the field), Redis's "not now" a 503
with ``Retry-After`` (``redis_refusal``), anything else a 500 without detail."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Sequence
from typing import Any

import redis
from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from fivetran_events import Settings

log = logging.getLogger(__name__)


class ApiError(Exception):
    """Raised by a view for any error the client caused (or 503 when a dependency is down);
    answered as JSON with its status, message, ``field`` and ``headers``."""

    def __init__(
        self,
        status_code: int,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.field = field
        self.headers = headers or {}


#: Redis error codes that mean "not now": the server is up but refuses writes for a while (out
#: of memory under noeviction, a replica after a failover, a failed save, a busy script,
#: loading, no reachable primary or replicas): the write succeeds later, so 503, retried.
REFUSAL_CODES = frozenset(
    {"OOM", "READONLY", "MISCONF", "BUSY", "LOADING", "MASTERDOWN", "NOREPLICAS", "TRYAGAIN"}
)


def redis_refusal(exc: BaseException) -> str | None:
    """Name why Redis cannot take a write now (an error code, or ``unreachable``), else None:
    redis-py moves the code of the errors it has a class for (``OutOfMemoryError``, ...) to
    ``status_code``; others (``BUSY``, ``MISCONF``) are a ``ResponseError`` starting with it."""
    code = getattr(exc, "status_code", None)
    if isinstance(exc, redis.ResponseError):
        code = code or str(exc).split(" ", 1)[0]
        return code if code in REFUSAL_CODES else None
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return code if code in REFUSAL_CODES else "unreachable"  # LOADING is a ConnectionError
    return None


def token_refusal(tokens: Sequence[str]) -> ApiError | None:
    """The error for a bearer token not in ``tokens`` (FIVETRAN_EVENTS_API_TOKENS), else None."""
    if not tokens:
        return ApiError(403, "the read API is disabled: set FIVETRAN_EVENTS_API_TOKENS")
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return ApiError(
            401, "send 'Authorization: Bearer <token>'", headers={"WWW-Authenticate": "Bearer"}
        )
    given_b = given.strip().encode("utf-8", "replace")
    ok = False
    for token in tokens:  # every token compared, in constant time each
        ok |= hmac.compare_digest(token.encode(), given_b)
    if ok:
        return None
    # RFC 6750: a token that does not authenticate is 401 with error="invalid_token";
    # 403 stays for "no token could ever pass" (none configured).
    return ApiError(
        401,
        "the bearer token is not valid",
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )


def json_error(
    status: int, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    resp = jsonify({"status": "error", "error": message, **extra})
    resp.status_code = status
    resp.headers.update(headers or {})
    return resp


def _allowed_methods(app: Flask, exc: HTTPException) -> str:
    """The ``Allow`` header a 405 must carry (RFC 9110, 15.5.6): the URL's methods."""
    methods = getattr(exc, "valid_methods", None)
    if not methods:
        methods = app.url_map.bind_to_environ(request.environ).allowed_methods()
    return ", ".join(sorted(methods))


def register(app: Flask, settings: Settings) -> None:
    """Answer every error of ``app`` as JSON (503s with ``Retry-After``)."""
    retry = {"Retry-After": str(settings.retry_after_seconds)}

    @app.errorhandler(ApiError)
    def api_error(exc: ApiError) -> Response:
        headers = dict(exc.headers)
        if exc.status_code == 503:
            headers.update(retry)
        return json_error(
            exc.status_code, exc.message, headers, **({"field": exc.field} if exc.field else {})
        )

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        message = exc.description or exc.name
        headers: dict[str, str] = {}
        if exc.code == 413:
            message = f"body is larger than {settings.max_body_bytes} bytes"
        if exc.code == 405:
            headers["Allow"] = _allowed_methods(app, exc)
        return json_error(exc.code or 400, message, headers)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unexpected error")
        return json_error(500, "internal error")

    @app.errorhandler(redis.RedisError)
    def unavailable(exc: Exception) -> Response:
        reason = redis_refusal(exc)
        if reason is None:
            return unexpected(exc)
        log.warning("answering 503 (%s): %s", reason, exc)
        return json_error(503, f"storage is unavailable ({reason}), retry later", retry)
