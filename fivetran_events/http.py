"""What every HTTP client we own shares (Fivetran's, Airflow's, the OpenLineage sender): one error
model, one reading of an answer, one backoff.

The errors, drawn once::

    RetryableError               may pass when tried again later (the forwarder retries it)
    HttpError                    a request to a service failed: service, method, path,
     |                           status, retry_after, maybe_sent
     +-- Unavailable(Retryable)  no answer, a timeout, 5xx, 429, or an answer not the
     |                           service's own: later may work
     +-- Rejected                a 4xx: the request is at fault; resending will not help
          +-- NotFound           404: what the request names does not exist

``maybe_sent`` is False only when the request certainly was not applied: no connection was made, or
the answer was 429, 503 or a 4xx (the server refused it). A 500, 502, 504, a timeout or a reset may
come after the server applied it, so a POST of that outcome must not be sent blindly again.
``classify`` is the one reading of a status; each service's errors are thin subclasses
(``fivetran_events.exceptions``, ``webhook_app.exceptions``) named in a ``Family``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from .timeutil import UTC

if TYPE_CHECKING:
    import requests

QUOTE_LIMIT = 500
#: Answers that say the request was not handled at all (nothing can have been applied).
NOT_HANDLED = frozenset({429, 503})


class RetryableError(Exception):
    """Base class of the failures that may pass when tried again later: the forwarder's retry
    acts on this one type (``maybe_sent``: see above)."""

    retry_after: float | None = None
    maybe_sent: bool = True


class HttpError(Exception):
    """Base class of a failed request to a service we call; the message names the call
    (``METHOD path: reason``), ``status`` is None when no answer came."""

    maybe_sent = True

    def __init__(
        self,
        method: str,
        path: str,
        reason: str,
        status: int | None = None,
        *,
        retry_after: float | None = None,
        maybe_sent: bool | None = None,
    ) -> None:
        super().__init__(f"{method} {path}: {reason}")
        self.method, self.path, self.reason, self.status = method, path, reason, status
        self.retry_after = retry_after
        if maybe_sent is not None:  # else the class's: a 4xx was refused, not applied
            self.maybe_sent = maybe_sent


class Unavailable(HttpError, RetryableError):
    """Raised when a service cannot be reached or answer now; try after ``retry_after`` if set."""


class Rejected(HttpError):
    """Raised on a 4xx (other than 429): the request is at fault, or its credentials."""

    maybe_sent = False


class NotFound(Rejected):
    """Raised on a 404: what the request names does not exist there."""


@dataclass(frozen=True)
class Family:
    """One service's errors: what ``classify`` raises (``auth_failed``: on 401 and 403)."""

    service: str
    unavailable: type[Unavailable]
    rejected: type[Rejected]
    not_found: type[NotFound]
    auth_failed: type[Rejected] | None = None


def classify(
    family: Family, method: str, path: str, resp: requests.Response, said: str | None = None
) -> HttpError | None:
    """Return the error ``resp`` means (None for a 2xx): 429 and 5xx are unavailable, 404
    not found, other 4xx rejected, anything else unavailable. ``said`` is what the service
    said, when its body was read already (else the body, quoted)."""
    status = resp.status_code
    if 200 <= status < 300:
        return None
    text = said if said is not None else (resp.text or resp.reason or "")
    reason = f"{family.service} answered {status}" + (f": {quoted(text)}" if text else "")
    if status == 429 or status >= 500:
        wait = retry_after_seconds(resp.headers.get("Retry-After"))
        sent = status not in NOT_HANDLED
        return family.unavailable(method, path, reason, status, retry_after=wait, maybe_sent=sent)
    if not 400 <= status < 500:
        return family.unavailable(method, path, reason, status)
    kind = {404: family.not_found, 401: family.auth_failed, 403: family.auth_failed}.get(status)
    return (kind or family.rejected)(method, path, reason, status)


def unreachable(
    family: Family,
    method: str,
    path: str,
    where: str,
    exc: requests.RequestException,
    timeout: float,
) -> Unavailable:
    """The error of a request that got no answer from ``where`` (the service's base URL);
    it names why in words (never the URL's credentials: requests leaves them out)."""
    import requests

    why = f"{type(exc).__name__}: {quoted(str(exc))}"
    if isinstance(exc, requests.ConnectTimeout):
        why = f"no connection within {timeout:g} s (ConnectTimeout)"
    elif isinstance(exc, requests.ReadTimeout):
        why = f"no answer within {timeout:g} s (ReadTimeout)"
    elif never_sent(exc):
        why = "connection refused or host unreachable"
    reason = f"cannot reach {family.service} at {where}: {why}"
    return family.unavailable(method, path, reason, maybe_sent=not never_sent(exc))


def backoff(attempt: int, first: float, most: float, jitter: float | None = None) -> float:
    """Seconds to wait after the ``attempt``-th failure (from 1): ``first``, doubled each
    attempt, at most ``most``. With ``jitter`` (0..1) half the wait is fixed and half
    scaled by it, so clients that failed together do not return together."""
    ceiling = min(most, first * 2.0 ** min(max(attempt - 1, 0), 60))
    return ceiling if jitter is None else ceiling / 2 + jitter * ceiling / 2


def never_sent(exc: requests.RequestException) -> bool:
    """Whether ``exc`` means no connection was made (so even a POST may be sent again)."""
    # Imported here: the web process imports this module but must not load an HTTP client.
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
