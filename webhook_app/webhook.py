"""``POST /webhooks/fivetran``: verify, parse, record; answer fast. And the probes:
``/healthz``, ``/readyz`` (would a delivery be taken now?) and ``/metrics``; and the JSON
schemas an OpenLineage facet's ``_schemaURL`` names, ``/schemas/<name>``.

With ``FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS`` = n > 0 the webhook answers 2xx only once n
replicas confirmed the write, else 503 (Fivetran delivers again): a delivery on the
primary alone is lost if Sentinel promotes a replica that never had it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import redis
from flask import Blueprint, Response, jsonify, request, send_from_directory
from werkzeug.exceptions import RequestEntityTooLarge

from fivetran_events import Event, EventKind, InvalidPayload, WriteStatus, parse_event
from fivetran_events.destinations import STALE_EVENTS, mark_stale
from fivetran_events.keys import ConnectorKeys, readiness_key
from fivetran_events.model import (
    KNOWN_STATUSES,
    SIGNATURE_HEADER,
    UNCHECKED_KINDS,
    lifecycle_name,
    verify,
)
from fivetran_events.reconcile import fivetran_side
from fivetran_events.timeutil import now_ms

from . import logs, metrics
from .api import ApiError
from .state import State, state

bp = Blueprint("webhook", __name__)
log = logging.getLogger(__name__)

#: Distinct unknown ``sync_end`` statuses a process names in its metric; past them the
#: label is OTHER_UNKNOWN, so a flood of made-up values cannot grow the series without end.
MAX_UNKNOWN_STATUSES = 20
_unknown_statuses: set[str] = set()

#: The schemas /schemas/<name> serves (package data): public documentation, no token.
SCHEMAS = Path(__file__).parent / "schemas"

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
        # The tables may have changed: the next table-level delivery reads them again.
        # Not for a sample delivery: it is checked for nothing and written nowhere.
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


#: Life of the readiness key, written by /readyz and before WAIT: it never accumulates,
#: yet shows up in a MONITOR.
PROBE_TTL_MS = 60_000


def confirm_replicas(st: State, event: Event, status: WriteStatus) -> None:
    """Return once enough replicas hold the delivery just handled (a duplicate's too: its
    first delivery may have been answered 503); raise 503 otherwise."""
    if status is WriteStatus.IGNORED or st.settings.redis_wait_replicas == 0:
        return  # the common case: nothing to build on the webhook's path
    seen = (ConnectorKeys(st.settings.key_prefix, event.connector_id).seen, event.dedup_id)
    short = missing_replicas(st, seen)
    if short is not None:
        raise ApiError(503, f"recorded, but {short}; retry later")


def missing_replicas(st: State, seen: tuple[str, str] | None = None) -> str | None:
    """Write a marker and WAIT for it; say how many replicas fell short, or None.

    WAIT counts its own connection's writes, which may not be the history's, so a marker
    goes first (a replica holding it holds every write before). ``seen`` (a delivery's
    dedup entry) is read on the same connection: a new primary after a failover may lack it.
    """
    wanted = st.settings.redis_wait_replicas
    if wanted == 0:
        return None
    timeout_ms = st.settings.redis_wait_timeout_ms
    pipe = st.redis.pipeline(transaction=False)
    if seen is not None:
        pipe.zscore(*seen)
    pipe.set(readiness_key(st.settings.key_prefix), now_ms(), px=PROBE_TTL_MS)
    pipe.wait(wanted, timeout_ms)
    replies = pipe.execute()
    if seen is not None and replies[0] is None:
        return "the Redis primary answering now does not hold it (a failover?)"
    confirmed = int(replies[-1])
    if confirmed >= wanted:
        return None
    return (
        f"only {confirmed} of {wanted} Redis replicas confirmed it within {timeout_ms} ms "
        "(FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS)"
    )


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz() -> Response:
    """Ready means Redis takes a write: a replica, a full memory or a failed save answer
    PING but refuse every delivery, so a PING would keep sending Fivetran here."""
    reason = write_refusal(state())
    if reason == "unreachable":
        raise ApiError(503, "not ready: Redis is unreachable")
    if reason is not None:
        raise ApiError(503, f"not ready: Redis refuses writes ({reason})")
    short = missing_replicas(state())
    if short is not None:
        raise ApiError(503, f"not ready: a write was taken, but {short}")
    body: dict[str, object] = {"status": "ready"}
    # What the last reconcile found (read from Redis, never from Fivetran per call): an
    # inactive webhook does not make this server unready, it is why nothing arrives.
    try:
        side = fivetran_side(state().redis, state().settings.key_prefix)
    except redis.RedisError:  # Redis took the probe's write: readiness is decided
        side = None
    if side is not None:
        body["fivetran"] = side
    return jsonify(body)


def write_refusal(st: State) -> str | None:
    """Write the probe key; return why Redis refused (``redis_refusal``), or None; other
    errors are raised. The reason never carries Redis's address, which /readyz shows."""
    try:
        st.redis.set(readiness_key(st.settings.key_prefix), now_ms(), px=PROBE_TTL_MS)
    except redis.RedisError as exc:
        reason = redis_refusal(exc)
        if reason is None:
            raise
        return reason
    return None


@bp.get("/metrics")
def prometheus() -> Response:
    st = state()
    gauges = metrics.RedisGauges(st.redis, st.settings.key_prefix, freshness=st.reader.freshness)
    body, content_type = metrics.render(gauges)
    return Response(body, content_type=content_type)


@bp.get("/schemas/<name>")
def schema(name: str) -> Response:
    """A JSON schema by its file name (forwarding/lineage.py's FACET_SCHEMA_PATH); an
    unknown name, or one that leaves the folder, is a 404."""
    return send_from_directory(SCHEMAS, name, mimetype="application/schema+json")
