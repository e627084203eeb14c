"""The web program's factory: the Flask app, its endpoints, probes and error handlers."""

from __future__ import annotations

from typing import Any

from flask import Flask

from fivetran_events import ConfigurationError, Settings, load_settings

from .state import EXTENSION, State


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

    from . import api, errors, logs, probes, webhook

    logs.init_app(app)
    app.register_blueprint(webhook.bp)
    app.register_blueprint(probes.bp)
    app.register_blueprint(api.bp)
    api.init_app(app)  # GET /api/openapi.json
    errors.register(app, settings)
    return app
