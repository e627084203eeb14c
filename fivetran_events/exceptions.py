"""Exceptions of the shared core; each says when it is raised. Fivetran's API errors are
the shared HTTP model's (``http.py``) for that service."""

from __future__ import annotations

from pathlib import Path

from .http import Family, HttpError, NotFound, Rejected, Unavailable


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


class LogReadError(ConfigurationError):
    """Raised when an import's input cannot be read as Fivetran's LOG table (a missing
    column, not CSV/JSON Lines, a database that cannot be read)."""


class SqlFolderError(FivetranEventsError):
    """Raised when a SQL folder cannot become a DAG (sql_folder.py), naming the file at fault."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class MissingExtraError(ImportError):
    """Raised when a part is imported without its extra (airflow_plugin/extras.py names it)."""


class FivetranApiError(FivetranEventsError, HttpError):
    """Base class of a failed call to Fivetran's REST API; the message names the call and
    why (``status`` None: no answer), ``code`` and ``message`` are what Fivetran said."""

    code: str | None = None
    message: str | None = None


class FivetranUnavailable(FivetranApiError, Unavailable):
    """Raised when Fivetran cannot be reached or cannot answer now (no answer, 5xx, 429
    past the retries, not Fivetran's JSON); later may work."""


class FivetranRejected(FivetranApiError, Rejected):
    """Raised when Fivetran answers a 4xx other than 429: the request itself is at fault."""


class FivetranAuthFailed(FivetranRejected):
    """Raised on 401 or 403: the key and secret are wrong, or lack the permission."""


class FivetranNotFound(FivetranRejected, NotFound):
    """Raised on 404: the connection, group or webhook named does not exist."""


#: What ``http.classify`` raises for Fivetran's answers.
FIVETRAN = Family(
    "Fivetran", FivetranUnavailable, FivetranRejected, FivetranNotFound, FivetranAuthFailed
)
