"""API errors: one exception class, one handler, JSON bodies that say what to fix.

Also which Redis errors mean "retry later" (503) rather than a bug of ours (500).
"""

from __future__ import annotations

import redis


class ApiError(Exception):
    """Raised by a view for any error the client caused (or 503 when a dependency is down)."""

    def __init__(
        self,
        status_code: int,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.field = field
        self.headers = headers or {}


#: Redis error codes that mean "not now": the server is up but refuses writes for a
#: while (out of memory under noeviction, a replica after a failover, a failed save, a
#: busy script, loading its data set, no reachable primary or replicas). The same write
#: succeeds once it recovers, so the answer is 503 and Fivetran retries.
REFUSAL_CODES = frozenset(
    {"OOM", "READONLY", "MISCONF", "BUSY", "LOADING", "MASTERDOWN", "NOREPLICAS", "TRYAGAIN"}
)


def redis_refusal(exc: BaseException) -> str | None:
    """Name why Redis cannot take a write now (an error code, or ``unreachable``), else None.

    redis-py strips the code from the errors it has a class for (``OutOfMemoryError``,
    ``ReadOnlyError``, ...) and keeps it in ``status_code``; others (``BUSY``,
    ``MISCONF``) come as a plain ``ResponseError`` whose message starts with it.
    """
    code = getattr(exc, "status_code", None)
    if isinstance(exc, redis.ResponseError):
        code = code or str(exc).split(" ", 1)[0]
        return code if code in REFUSAL_CODES else None
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return code if code in REFUSAL_CODES else "unreachable"  # LOADING is a ConnectionError
    return None
