"""``POST /webhooks/fivetran``: read, verify, parse, record, wait for replicas when asked
(``probes.confirm_replicas``); answer fast. Its errors are ``errors.ApiError``."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from flask import Blueprint, Response, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from fivetran_events import Event, EventKind, InvalidPayload, WriteStatus, parse_event
from fivetran_events.destinations import STALE_EVENTS, mark_stale
from fivetran_events.model import (
    KNOWN_STATUSES,
    SIGNATURE_HEADER,
    UNCHECKED_KINDS,
    lifecycle_name,
    verify,
)

from . import logs, metrics
from .errors import ApiError
from .probes import confirm_replicas
from .state import state

bp = Blueprint("webhook", __name__)
log = logging.getLogger(__name__)

#: Distinct unknown ``sync_end`` statuses a process names in its metric; past them the
#: label is OTHER_UNKNOWN, so a flood of made-up values cannot grow the series without end.
MAX_UNKNOWN_STATUSES = 20
_unknown_statuses: set[str] = set()

#: Bytes asked of the WSGI server per read of a streamed body.
READ_SIZE = 64 * 1024
#: After refusing a streamed body, read and drop up to this much more of it: a client
#: still sending would otherwise see its connection reset instead of the 413.
DRAIN_BYTES = 1024 * 1024


@bp.post("/webhooks/fivetran")
def receive() -> Response:
    started = time.perf_counter()
    outcome = "unavailable"  # what is left once the client's mistakes are told apart
    try:
        answer = _receive()
        outcome = answer["status"]
        return jsonify(answer)
    except ApiError as exc:
        outcome = {400: "invalid", 401: "unauthorized"}.get(exc.status_code, outcome)
        raise
    except RequestEntityTooLarge:
        outcome = "too_large"
        raise
    finally:
        # No line of its own: gunicorn's access record carries the outcome (logs.py).
        logs.bind(outcome=outcome)
        metrics.DELIVERIES.labels(outcome=outcome).inc()
        metrics.LATENCY.observe(time.perf_counter() - started)


def _receive() -> dict[str, Any]:
    st = state()
    body = read_body(st.settings.max_body_bytes)
    if not verify(body, request.headers.get(SIGNATURE_HEADER), st.settings.webhook_secrets):
        raise ApiError(401, f"missing or invalid {SIGNATURE_HEADER} signature")
    try:
        event = parse_event(body)
        logs.bind(connector_id=event.connector_id, sync_id=event.sync_id)
        for name in event.dropped:  # taken without them: a refusal would disable the webhook
            metrics.DROPPED_FIELDS.labels(field=name).inc()
        result = st.writer.record(
            event, on_success=st.on_success, max_clock_skew_ms=st.settings.max_clock_skew_ms
        )
    except InvalidPayload as exc:
        raise ApiError(400, exc.message, field=exc.field) from None
    confirm_replicas(st, event, result.status)  # FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS
    if (
        event.connector_id
        and event.kind not in UNCHECKED_KINDS
        and lifecycle_name(event.event) in STALE_EVENTS
    ):
        # The tables may have changed (a sample is written nowhere): the next delivery rereads them.
        mark_stale(st.redis, st.settings.key_prefix, event.connector_id)
    if result.status is WriteStatus.RECORDED and event.kind is EventKind.SYNC_END:
        count_status(event)
    answer: dict[str, Any] = {"status": result.status.value, "event": event.event}
    if event.connector_id:
        answer["connector_id"] = event.connector_id
    if event.sync_id:
        answer["sync_id"] = event.sync_id
        if event.sync_id_derived:
            answer["sync_id_derived"] = True
    if result.reason:
        answer["reason"] = result.reason
    if event.dropped:
        answer["dropped_fields"] = list(event.dropped)
    return answer


def count_status(event: Event) -> None:
    """Count a recorded sync_end by status; log the first of each status nobody knows."""
    status = event.status or ""
    if status not in KNOWN_STATUSES and status not in _unknown_statuses:
        if len(_unknown_statuses) >= MAX_UNKNOWN_STATUSES:
            status = "OTHER_UNKNOWN"
        else:
            _unknown_statuses.add(status)
            log.warning(
                "sync_end status %r is not one fivetran-events knows: recorded as a "
                "non-completion (neither success nor failure); connector %s, sync %s",
                status,
                event.connector_id,
                event.sync_id,
            )
    metrics.SYNC_END_STATUSES.labels(status=status).inc()


def read_body(limit: int) -> bytes:
    """Return the raw body; raise 413 when it is longer than ``limit``, however it is framed
    (werkzeug would hand back a chunked body's first ``limit`` bytes as if they were all)."""
    environ = request.environ
    if request.content_length is not None or not environ.get("wsgi.input_terminated"):
        return request.get_data(cache=False)
    stream = environ["wsgi.input"]
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= limit:
            chunk = stream.read(min(READ_SIZE, limit + 1 - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
    except Exception:  # the server's stream raises its own errors (gunicorn: ParseException)
        raise ApiError(
            400,
            "the request body could not be read: broken chunked framing or the client went away",
            field="body",
        ) from None
    _drain(stream)
    raise RequestEntityTooLarge()


def _drain(stream: Any) -> None:
    """Read and drop what is left of a refused body, up to DRAIN_BYTES."""
    left = DRAIN_BYTES
    with contextlib.suppress(Exception):  # a broken rest changes nothing: the answer is 413
        while left > 0 and (chunk := stream.read(min(READ_SIZE, left))):
            left -= len(chunk)
