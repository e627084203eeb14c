"""How a completion is stored: a short member of the ``ok``/``fail``/``other`` sets.

A success's member is at most 28 bytes, so that with Redis's string header and
terminator it fits a 32-byte allocation (docs/internals.md)::

    member  = token "," [delta] ["@" end] [source] [" " json]
    token   = base64url of the 16 bytes of a canonical lowercase UUID (22 characters)
            | "." sync_id          (any other sync id; "." never starts a base64 token)
    delta   = end - start of the attempt, in ms, base 36; empty when no start is known
    end     = the end in ms, base 36: only when another end of the same sync would
              otherwise have the same member (two successes of one sync id, no start)
    source  = model.SOURCE_*: "I" imported, "R" reconciled; none for a webhook delivery
    json    = {"st": status, "r": reason, "tt": task_type, "ra": rescheduled_at_ms}:
              only for anything but SUCCESSFUL (rare, and possibly long)

The end is the member's score in ``ok``/``fail``/``other``, start + delta in ``okstart`` (by
start). Sync ids never contain "," or " " (model.ID_PATTERN); _lua.py only rewrites the delta.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from typing import Any

from ..decision import Completion
from ..model import Event
from ..text import as_text

#: How far apart two copies of one sync's start or end from different sources (a webhook's
#: ``created``, the LOG table's ``time_stamp``: model.SOURCE_*) may be dated and still be one
#: record: the first copy stays, the other is already known. Copies from one source keep the
#: exact-time rule (two ends of one sync with one status are two records when times differ).
SAME_SYNC_WINDOW_MS = 5 * 60 * 1000

_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def b36(n: int) -> str:
    """Write a non-negative integer in base 36, as the script's ``b36`` does."""
    if n < 0:
        raise ValueError("a sync cannot end before it started")
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = _DIGITS[r] + out
        if n == 0:
            return out


#: A UUID as ``str(uuid.UUID(...))`` writes it: only these become tokens (upper case,
#: braces or no dashes are kept as they came, so the token gives back the same text).
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def sync_token(sync_id: str) -> str:
    if not _CANONICAL_UUID.match(sync_id):
        return "." + sync_id
    return base64.urlsafe_b64encode(bytes.fromhex(sync_id.replace("-", ""))).rstrip(b"=").decode()


def sync_id_of(token: str) -> str:
    if token.startswith("."):
        return token[1:]
    return str(uuid.UUID(bytes=base64.urlsafe_b64decode(token + "==")))


def completion_parts(
    sync_id: str,
    status: str,
    reason: str | None,
    task_type: str | None,
    rescheduled_at_ms: int | None = None,
    source: str = "",
) -> tuple[str, str]:
    """Return a completion member's prefix (``token ","``) and suffix (after the delta)."""
    suffix = source
    if status != "SUCCESSFUL":
        body: dict[str, Any] = {"st": status}
        if reason:
            body["r"] = reason
        if task_type:
            body["tt"] = task_type
        if rescheduled_at_ms is not None:
            body["ra"] = rescheduled_at_ms
        suffix += " " + json.dumps(body, separators=(",", ":"), sort_keys=True)
    return sync_token(sync_id) + ",", suffix


def end_parts(event: Event) -> tuple[str, str]:
    """``completion_parts`` of a sync_end."""
    return completion_parts(
        event.sync_id or "",
        event.status or "",
        event.reason,
        event.task_type,
        event.rescheduled_at_ms,
        event.source,
    )


def encode_completion(event: Event, started_ms: int | None = None) -> str:
    """Encode a sync_end as a member, with its attempt's start when known."""
    prefix, suffix = end_parts(event)
    delta = "" if started_ms is None else b36(event.created_ms - started_ms)
    return prefix + delta + suffix


def decode_completion(
    member: str | bytes, score: float | None = None, by_start: bool = False
) -> Completion:
    """Decode a member read with its ``score``: the end, or the start (``by_start``)."""
    text = as_text(member)
    if score is None:
        raise ValueError("a completion member needs its score")
    head, _, extra = text.partition(" ")
    token, _, rest = head.partition(",")
    source = rest[-1] if rest[-1:].isupper() else ""  # base 36 is lower case
    delta_text = rest[: len(rest) - len(source)].partition("@")[0]
    body = json.loads(extra) if extra else {"st": "SUCCESSFUL"}
    delta = int(delta_text, 36) if delta_text else None
    if by_start:
        if delta is None:
            raise ValueError("a member scored by its start must carry its duration")
        started: int | None = int(score)
        ended = int(score) + delta
    else:
        ended = int(score)
        started = None if delta is None else ended - delta
    status = body["st"]
    return Completion(
        sync_id=sync_id_of(token),
        status=status,
        ended_ms=ended,
        succeeded=status == "SUCCESSFUL",
        reason=body.get("r"),
        task_type=body.get("tt"),
        started_ms=started,
        rescheduled_at_ms=int(body["ra"]) if "ra" in body else None,
        source=source,
    )
