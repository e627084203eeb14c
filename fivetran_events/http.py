"""What every HTTP client we own shares (Fivetran's, Airflow's, the OpenLineage sender):
how a failed request is judged."""

from __future__ import annotations

import math
import time
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from .timeutil import UTC

if TYPE_CHECKING:
    import requests

QUOTE_LIMIT = 500


class RetryableError(Exception):
    """Base class of the failures that may pass when tried again later (the forwarder's
    retry acts on this one type). ``maybe_sent`` is False only when the request certainly
    never reached the server, so nothing it would have created can exist."""

    retry_after: float | None = None
    maybe_sent: bool = True


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
