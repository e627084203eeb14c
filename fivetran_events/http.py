"""What every HTTP client we own shares: Fivetran's, Airflow's and the OpenLineage sender.

One place answers the questions each of them asks of a failed request:

- ``never_sent``: did the request certainly never reach the server (so nothing can have
  been applied, and even a POST may be sent again)?
- ``retry_after_seconds``: how long did the server ask us to wait (seconds or an HTTP
  date, RFC 9110 section 10.2.3)?
- ``quoted``: the piece of an answer's body an error message quotes.
- ``RetryableError``: the base class of every failure that may pass, so the forwarder's
  retry acts on one type, not on a duck type shared by several classes.
"""

from __future__ import annotations

import math
import time
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from .timeutil import UTC

if TYPE_CHECKING:
    import requests

#: Longest piece of an answer's body quoted in an error message.
QUOTE_LIMIT = 500


class RetryableError(Exception):
    """Base class of the failures that may pass when tried again later.

    ``retry_after``: the seconds the server asked to wait (a 429's or 503's Retry-After),
    None when it asked nothing. ``maybe_sent``: False only when the request certainly
    never reached the server, so nothing it would have created can exist.
    """

    retry_after: float | None = None
    maybe_sent: bool = True


def never_sent(exc: requests.RequestException) -> bool:
    """Whether ``exc`` means the request never left: no connection was made.

    A read timeout or a reset after the connection was made may have been applied.
    """
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
    """Parse a Retry-After header (seconds or an HTTP date) into seconds from now.

    Garbage, NaN and negative numbers give None (no wish expressed: the normal backoff);
    a huge or infinite value is returned as it is, for the caller to cap (the forwarder:
    ``FIVETRAN_EVENTS_MAX_RETRY_AFTER_SECONDS``; Fivetran's client: ``max_retry_after``).
    """
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
