"""Exceptions of the worker's program, each saying when it is raised; Airflow's are the
shared HTTP model's (fivetran_events/http.py), raised by ``http.classify``."""

from __future__ import annotations

from fivetran_events import http


class AirflowError(http.HttpError):
    """Base class of the errors the Airflow client raises."""


class AirflowUnavailable(AirflowError, http.Unavailable):
    """Raised on connection errors, timeouts, 5xx, 429 and answers not Airflow's JSON: retried."""


class AirflowLoginUnavailable(AirflowUnavailable):
    """Raised when the login cannot produce a token now (a token file missing or empty, a
    token command failing): nothing was sent; retried."""


class AirflowRejected(AirflowError, http.Rejected):
    """Raised on a 4xx other than 429 and 404, and on a 401 after one fresh token (or
    from a login that has no other): given up, with the reason."""


class AirflowNotFound(AirflowRejected, http.NotFound):
    """Raised on a 404 of an endpoint that should exist (a path or version mismatch)."""


class AssetNotFound(AirflowNotFound):
    """Raised when Airflow knows no dataset/asset with the URI (no DAG uses it yet)."""


#: What ``http.classify`` raises for Airflow's answers.
AIRFLOW = http.Family("Airflow", AirflowUnavailable, AirflowRejected, AirflowNotFound)


class RefusedJob(Exception):
    """Raised when a job read from Redis is not ours (``worker.queue.refusal``): logged, not run."""


class ReplicasShort(http.RetryableError):
    """Raised before an asset POST when too few Redis replicas confirmed the in-flight
    mark in time (``FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS``): nothing was posted."""

    maybe_sent = False


class LineageUnavailable(http.RetryableError):
    """Raised when the OpenLineage transport failed in a way that may pass (no answer, 5xx,
    429); ``maybe_sent`` is unused: a receiver cannot be asked whether it holds an event."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(f"OpenLineage receiver unavailable: {type(cause).__name__}: {cause}")
        response = getattr(cause, "response", None)
        headers = getattr(response, "headers", None) or {}
        self.retry_after = http.retry_after_seconds(headers.get("Retry-After"))
