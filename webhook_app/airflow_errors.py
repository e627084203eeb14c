"""Airflow's errors as the forwarder acts on them, and the classifying of its answers.

``airflow_client.py`` sends the requests; this module classifies what comes back
(status, Retry-After, a transport error, an answer that is not Airflow's JSON), so the
attempt (``forwarding/attempt.py``) acts on typed errors: ``AirflowUnavailable`` (retry
later, perhaps after ``retry_after`` seconds; ``maybe_sent`` when the request may have
reached Airflow), ``AssetNotFound`` (no DAG uses that URI: record, do not retry forever),
``AirflowRejected`` (a 4xx: retrying will not help; ``body`` says why).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import requests

from fivetran_events.http import RetryableError, quoted


class AirflowError(Exception):
    """Base class of the errors this client raises."""


class AirflowUnavailable(AirflowError, RetryableError):
    """Raised on connection errors, timeouts, 5xx and 429: retry, after ``retry_after`` if set.

    ``maybe_sent`` is False only when the request certainly never reached Airflow (the
    connection was refused or not made), so an event cannot have been created.
    """

    def __init__(
        self,
        message: str,
        retry_after: float | None = None,
        maybe_sent: bool = True,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.maybe_sent = maybe_sent
        self.status = status


class AssetNotFound(AirflowError):
    """Raised when Airflow knows no dataset/asset with the URI (no DAG uses it yet)."""


class AirflowRejected(AirflowError):
    """Raised on a 4xx other than 404 and 429 (after one token refresh on 401)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"Airflow answered {status}: {body}")
        self.status = status
        self.body = body


@contextmanager
def unexpected_answer_is_a_retry(what: str) -> Iterator[None]:
    """Classify an answer that is not Airflow's JSON (a proxy's error page, say) as a retry.

    Only the parsing of Airflow's answers is wrapped, so a bug of ours elsewhere still
    fails the job visibly instead of being retried for the whole retry window.
    """
    try:
        yield
    except (ValueError, KeyError, TypeError) as exc:
        raise AirflowUnavailable(
            f"unexpected answer from Airflow to {what}: {type(exc).__name__}: {exc}"
        ) from None


def body_text(resp: requests.Response) -> str:
    """The piece of Airflow's answer an error quotes (the same cut as Fivetran's client)."""
    return quoted(resp.text or resp.reason)
