"""Exceptions of the shared core; each says when it is raised."""

from __future__ import annotations

from typing import Any

from .http import RetryableError


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


class FivetranApiError(FivetranEventsError):
    """Raised when a call to Fivetran's REST API fails; the message names the call and why
    (``status`` None: no answer)."""

    def __init__(
        self,
        method: str,
        path: str,
        reason: str,
        *,
        status: int | None = None,
        code: str | None = None,
        message: str | None = None,
    ) -> None:
        super().__init__(f"{method} {path}: {reason}")
        self.method = method
        self.path = path
        self.status = status
        self.code = code
        self.message = message


class FivetranUnavailable(FivetranApiError, RetryableError):
    """Raised when Fivetran cannot be reached or cannot answer now (no answer, 5xx, 429
    past the retries, not Fivetran's JSON); later may work."""

    def __init__(
        self,
        *args: str,
        retry_after: float | None = None,
        maybe_sent: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.retry_after = retry_after
        self.maybe_sent = maybe_sent


class FivetranRejected(FivetranApiError):
    """Raised when Fivetran answers a 4xx other than 429: the request itself is at fault."""


class FivetranAuthFailed(FivetranRejected):
    """Raised on 401 or 403: the key and secret are wrong, or lack the permission."""


class FivetranNotFound(FivetranRejected):
    """Raised on 404: the connection, group or webhook named does not exist."""
