"""What every HTTP client we own shares (Fivetran's, Airflow's, the OpenLineage sender):
one error model, one reading of an answer, one backoff.

The errors, drawn once::

    RetryableError               may pass when tried again later (the forwarder retries it)
    HttpError                    a request to a service failed: service, method, path,
     |                           status, retry_after, maybe_sent
     +-- Unavailable(Retryable)  no answer, a timeout, 5xx, 429, or an answer not the
     |                           service's own: later may work
     +-- Rejected                a 4xx: the request itself is at fault; sending it again
          |                      will not help
          +-- NotFound           404: what the request names does not exist

``maybe_sent`` is False only when the request certainly was not applied: no connection
was made, or the answer was 429, 503 or a 4xx (the server refused it). A 500, 502, 504,
a timeout or a reset may come after the server applied it, so a POST of that outcome must
not be sent blindly again. ``classify`` is the one reading of a status; each service's
errors are thin subclasses (``fivetran_events.exceptions``, ``webhook_app.airflow_client``)
named in a ``Family``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from .timeutil import UTC

if TYPE_CHECKING:
    import requests

QUOTE_LIMIT = 500
#: Answers that say the request was not handled at all (nothing can have been applied).
NOT_HANDLED = frozenset({429, 503})


class RetryableError(Exception):
    """Base class of the failures that may pass when tried again later (the forwarder's
    retry acts on this one type). ``maybe_sent`` is False only when the request certainly
    never reached the server, so nothing it would have created can exist."""

    retry_after: float | None = None
    maybe_sent: bool = True


class HttpError(Exception):
    """Base class of a failed request to a service we call; the message names the call
    (``METHOD path: reason``), ``status`` is None when no answer came."""

    def __init__(
        self,
        method: str,
        path: str,
        reason: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        maybe_sent: bool = True,
    ) -> None:
        super().__init__(f"{method} {path}: {reason}")
        self.method = method
        self.path = path
        self.reason = reason
        self.status = status
        self.retry_after = retry_after
        self.maybe_sent = maybe_sent


class Unavailable(HttpError, RetryableError):
    """Raised when a service cannot be reached or cannot answer now (no answer, a timeout,
    5xx, 429, an answer that is not the service's own); after ``retry_after`` if set."""


class Rejected(HttpError):
    """Raised on a 4xx (other than 429): the request is at fault, or its credentials."""


class NotFound(Rejected):
    """Raised on a 404: what the request names does not exist there."""


@dataclass(frozen=True)
class Family:
    """One service's errors: the classes ``classify`` raises for it."""

    service: str
    unavailable: type[Unavailable]
    rejected: type[Rejected]
    not_found: type[NotFound]
    #: Raised on 401 and 403 (default: ``rejected``).
    auth_failed: type[Rejected] | None = None


def classify(
    family: Family,
    method: str,
    path: str,
    resp: requests.Response,
    said: str | None = None,
    **extra: Any,
) -> HttpError | None:
    """Return the error ``resp`` means (None for a 2xx): 429 and 5xx are unavailable, 404
    not found, other 4xx rejected, anything else unavailable. ``said`` is what the service
    said, when its body was read already (else the body, quoted); ``extra`` goes to the
    error's constructor."""
    status = resp.status_code
    if 200 <= status < 300:
        return None
    text = said if said is not None else (resp.text or resp.reason or "")
    reason = f"{family.service} answered {status}" + (f": {quoted(text)}" if text else "")
    kwargs: dict[str, Any] = {"status": status, **extra}
    if status == 429 or status >= 500:
        return family.unavailable(
            method,
            path,
            reason,
            retry_after=retry_after_seconds(resp.headers.get("Retry-After")),
            maybe_sent=status not in NOT_HANDLED,
            **kwargs,
        )
    if status == 404:
        return family.not_found(method, path, reason, maybe_sent=False, **kwargs)
    if status in (401, 403):
        refused = family.auth_failed or family.rejected
        return refused(method, path, reason, maybe_sent=False, **kwargs)
    if 400 <= status < 500:
        return family.rejected(method, path, reason, maybe_sent=False, **kwargs)
    return family.unavailable(method, path, reason, maybe_sent=True, **kwargs)


def unreachable(
    family: Family,
    method: str,
    path: str,
    where: str,
    exc: requests.RequestException,
    timeout: float | None = None,
) -> Unavailable:
    """The error of a request that got no answer from ``where`` (the service's base URL)."""
    return family.unavailable(
        method,
        path,
        f"cannot reach {family.service} at {where}: {transport_reason(exc, timeout)}",
        maybe_sent=not never_sent(exc),
    )


def transport_reason(exc: requests.RequestException, timeout: float | None = None) -> str:
    """Why no answer came, in words (never the URL's credentials: requests leaves them out)."""
    import requests

    waited = f" within {timeout:g} s" if timeout is not None else ""
    if isinstance(exc, requests.ConnectTimeout):
        return f"no connection{waited} (ConnectTimeout)"
    if isinstance(exc, requests.ReadTimeout):
        return f"no answer{waited} (ReadTimeout)"
    if never_sent(exc):
        return "connection refused or host unreachable"
    return f"{type(exc).__name__}: {quoted(str(exc))}"


def backoff(attempt: int, first: float, most: float, jitter: float | None = None) -> float:
    """Seconds to wait after the ``attempt``-th failure (from 1): ``first``, doubled each
    attempt, at most ``most``. With ``jitter`` (0..1) half the wait is fixed and half
    scaled by it, so clients that failed together do not return together."""
    ceiling = min(most, first * 2.0 ** min(max(attempt - 1, 0), 60))
    return ceiling if jitter is None else ceiling / 2 + jitter * ceiling / 2


def never_sent(exc: requests.RequestException) -> bool:
    """Whether ``exc`` means no connection was made (so even a POST may be sent again)."""
    # Imported here: the web process imports this module (``RetryableError``, through
    # ``exceptions``) and must not load an HTTP client it never uses.
    import requests
    from urllib3.exceptions import NewConnectionError

    if isinstance(exc, requests.ConnectTimeout):
        return True
    if isinstance(exc, requests.ConnectionError):
        reason = getattr(exc.args[0], "reason", None) if exc.args else None
        return isinstance(reason, NewConnectionError)
    return False


def quoted(text: str | None, limit: int = QUOTE_LIMIT) -> str:
    """``text`` on one line, cut to ``limit`` characters, for an error message."""
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit] + "..."


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Parse a Retry-After header into seconds from now; None for garbage, NaN, negatives."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return None if math.isnan(seconds) or seconds < 0 else seconds
    try:
        when = parsedate_to_datetime(value)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
