"""Verify Fivetran's webhook signature (pure).

Fivetran sends ``X-Fivetran-Signature-256``: the HMAC-SHA256 of the raw body with the
webhook's secret, as UPPER-case hex. Compare over the raw bytes, case-insensitively and
in constant time; several secrets may be valid at once while one is rotated.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

SIGNATURE_HEADER = "X-Fivetran-Signature-256"


def sign(body: bytes, secret: str) -> str:
    """Return the signature Fivetran would send for ``body`` (upper-case hex)."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest().upper()


def verify(body: bytes, header: str | None, secrets: Iterable[str]) -> bool:
    """Return whether ``header`` is a valid signature of ``body`` under any of ``secrets``."""
    if not header:
        return False
    given = header.strip().lower().encode("ascii", "replace")
    ok = False
    for secret in secrets:
        expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest().encode()
        # No early exit: the time taken does not tell which secret matched.
        ok |= hmac.compare_digest(expected, given)
    return ok
