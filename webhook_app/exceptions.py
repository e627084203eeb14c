"""Exceptions of the forwarding side (the worker's program); each says when it is raised.

Airflow's errors are the shared HTTP model's (fivetran_events/http.py) for that service:
``http.classify`` raises them from Airflow's answers, and the forwarder acts on the base
classes (``RetryableError``: retry; ``AirflowRejected``: give up; ``AssetNotFound``:
undelivered until a DAG uses the asset).
"""

from __future__ import annotations

from fivetran_events.http import (
    Family,
    HttpError,
    NotFound,
    Rejected,
    RetryableError,
    Unavailable,
    retry_after_seconds,
)


class AirflowError(HttpError):
    """Base class of the errors the Airflow client raises."""


class AirflowUnavailable(AirflowError, Unavailable):
    """Raised on connection errors, timeouts, 5xx, 429 and answers that are not Airflow's
    JSON, and when the login cannot produce a token now (a token file missing, a token
    command failing): retried, after ``retry_after`` if set."""


class AirflowRejected(AirflowError, Rejected):
    """Raised on a 4xx other than 429 and 404, and on a 401 after one fresh token (or
    from a login that has no other): given up, with the reason."""


class AirflowNotFound(AirflowRejected, NotFound):
    """Raised on a 404 of an endpoint that should exist (a path or version mismatch)."""


class AssetNotFound(AirflowNotFound):
    """Raised when Airflow knows no dataset/asset with the URI (no DAG uses it yet)."""


#: What ``http.classify`` raises for Airflow's answers.
AIRFLOW = Family("Airflow", AirflowUnavailable, AirflowRejected, AirflowNotFound)


class ReplicasShort(RetryableError):
    """Raised before an asset POST when too few Redis replicas confirmed the in-flight
    mark in time (``FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS``): nothing was posted."""

    maybe_sent = False


class LineageUnavailable(RetryableError):
    """Raised when the OpenLineage transport failed in a way that may pass (no answer,
    5xx, 429); a receiver cannot be asked whether it holds an event, so ``maybe_sent`` is
    unused."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(f"OpenLineage receiver unavailable: {type(cause).__name__}: {cause}")
        response = getattr(cause, "response", None)
        headers = getattr(response, "headers", None) or {}
        self.retry_after = retry_after_seconds(headers.get("Retry-After"))
