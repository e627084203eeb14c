"""How a completion is stored: a compact JSON member of the ``ok``/``fail``/``ends`` sets."""

from __future__ import annotations

import json
from typing import Any

from ..decision import Completion
from ..model import Event


def encode_completion(event: Event, started_ms: int | None = None) -> str:
    """Encode a sync_end as a sorted-set member (compact JSON, unique per delivery).

    Keys are sorted, so the attempt's start ``b`` comes first: the write script adds it
    to a member when the start is known (``started_ms`` is for bulk loaders).
    """
    body: dict[str, Any] = {"s": event.sync_id, "st": event.status, "t": event.created_ms}
    if started_ms is not None:
        body["b"] = started_ms
    if event.reason:
        body["r"] = event.reason
    if event.task_type:
        body["tt"] = event.task_type
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def decode_completion(member: str | bytes, score: float | None = None) -> Completion:
    """Decode a completion member: encode_completion's, plus the attempt's start ``b``.

    The end time is the member's own ``t`` (``score`` only for members without one), so
    a member read from the start-scored index decodes the same.
    """
    body = json.loads(member)
    status = body["st"]
    ended = body.get("t", score)
    if ended is None:
        raise ValueError("completion without an end time")
    started = body.get("b")
    return Completion(
        sync_id=body["s"],
        status=status,
        ended_ms=int(ended),
        succeeded=status == "SUCCESSFUL",
        reason=body.get("r"),
        task_type=body.get("tt"),
        started_ms=None if started is None else int(started),
    )
