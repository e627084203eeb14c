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
    """Raised when a call to Fivetran's REST API fails; the message names the call and why.

    The hierarchy (``fivetran_events.fivetran_api`` raises only these)::

        FivetranApiError          method, path, status (None: no answer), code, message
        ├── FivetranUnavailable   no answer (refused, timed out, reset), 5xx, 429 past
        │                         the retries, or an answer that is not Fivetran's JSON
        └── FivetranRejected      a 4xx: retrying the same call will not help
            ├── FivetranAuthFailed   401/403: the key, the secret or their permissions
            └── FivetranNotFound     404: no such connection, group or webhook
    """

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
        #: Fivetran's ``code`` (e.g. ``NotFound_Webhook``) and ``message``, when it answered.
        self.code = code
        self.message = message


class FivetranUnavailable(FivetranApiError, RetryableError):
    """Raised when Fivetran cannot be reached or cannot answer now; later may work.

    ``retry_after``: the seconds Fivetran asked to wait (a 429's Retry-After), if any.
    ``maybe_sent``: whether a request that is not safe to repeat (a POST) may have
    reached Fivetran all the same (a timeout or reset after it was sent, a 5xx).
    """

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
