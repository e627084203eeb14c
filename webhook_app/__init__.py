"""Two programs over one Redis, and the ``fivetran-events`` CLI above both.

The web program is the Flask app (``app.create_app``: the webhook, the read API, the probes); the
worker program (``worker/``) runs the RQ worker, the sweeper, the pool and the reconcile schedule.
Importing this package loads neither: ``create_app`` is loaded on first use, so a worker never loads
Flask (``webhook_app:create_app`` still names it for gunicorn).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app


def __getattr__(name: str) -> Any:
    """Load ``create_app`` (and with it Flask) only when someone asks for it (PEP 562)."""
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["create_app"]
