"""Exceptions of the shared core; each says when it is raised."""

from __future__ import annotations


class FivetranEventsError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidPayload(FivetranEventsError):
    """Raised when a webhook body is not a valid Fivetran event; ``field`` names what to fix."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ConfigurationError(FivetranEventsError):
    """Raised when settings are missing or invalid; the message says which variable to set."""
