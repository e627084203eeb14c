"""The webhook server: Flask app factory, webhook endpoint, read API, RQ jobs, CLI."""

from __future__ import annotations

import logging
from typing import Any

import redis
from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from fivetran_events import ConfigurationError, Settings, load_settings

from .state import EXTENSION, State

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, **overrides: Any) -> Flask:
    """Build the app from ``settings`` (default: the ``FIVETRAN_EVENTS_*`` environment);
    never without a webhook secret, or it would record whatever anyone sends it."""
    settings = settings or load_settings(**overrides)
    if not settings.webhook_secrets:
        raise ConfigurationError(
            "FIVETRAN_EVENTS_WEBHOOK_SECRETS is empty: set it to the secret(s) of your "
            "Fivetran webhook (several: comma-separated, one a line or a JSON list)"
        )
    app = Flask(__name__)
    app.config.from_mapping(MAX_CONTENT_LENGTH=settings.max_body_bytes)
    app.json.sort_keys = False  # type: ignore[attr-defined]  # keep "status"/"decision" first
    app.extensions[EXTENSION] = State.from_settings(settings)

    from . import api, logs, webhook

    logs.init_app(app)
    app.register_blueprint(webhook.bp)
    app.register_blueprint(api.bp)
    api.init_app(app)  # GET /api/openapi.json
    _register_errors(app, settings)
    return app


def _json_error(
    status: int, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    resp = jsonify({"status": "error", "error": message, **extra})
    resp.status_code = status
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


def _allowed_methods(app: Flask, exc: HTTPException) -> str:
    """The ``Allow`` header a 405 must carry (RFC 9110, 15.5.6): the URL's methods."""
    methods = getattr(exc, "valid_methods", None)
    if not methods:
        methods = app.url_map.bind_to_environ(request.environ).allowed_methods()
    return ", ".join(sorted(methods))


def _register_errors(app: Flask, settings: Settings) -> None:
    from .api import ApiError
    from .webhook import redis_refusal

    retry = {"Retry-After": str(settings.retry_after_seconds)}

    @app.errorhandler(ApiError)
    def api_error(exc: ApiError) -> Response:
        headers = dict(exc.headers)
        if exc.status_code == 503:
            headers.update(retry)
        return _json_error(
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
        return _json_error(exc.code or 400, message, headers)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unexpected error")
        return _json_error(500, "internal error")

    @app.errorhandler(redis.RedisError)
    def unavailable(exc: Exception) -> Response:
        reason = redis_refusal(exc)
        if reason is None:
            return unexpected(exc)
        log.warning("answering 503 (%s): %s", reason, exc)
        return _json_error(503, f"storage is unavailable ({reason}), retry later", retry)


__all__ = ["create_app"]
