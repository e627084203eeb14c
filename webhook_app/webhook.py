"""``POST /webhooks/fivetran``: verify, parse, record; answer fast."""

from __future__ import annotations

import time

from flask import Blueprint, Response, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from fivetran_events import InvalidPayload, parse_event
from fivetran_events.signature import SIGNATURE_HEADER, verify

from . import metrics
from .errors import ApiError
from .state import state

bp = Blueprint("webhook", __name__)


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
        metrics.DELIVERIES.labels(outcome=outcome).inc()
        metrics.LATENCY.observe(time.perf_counter() - started)


def _receive() -> dict[str, str]:
    st = state()
    body = request.get_data(cache=False)
    if not verify(body, request.headers.get(SIGNATURE_HEADER), st.settings.webhook_secrets):
        raise ApiError(401, f"missing or invalid {SIGNATURE_HEADER} signature")
    try:
        event = parse_event(body)
        result = st.writer.record(event, on_success=st.enqueue_forward,
                                  max_clock_skew_ms=st.settings.max_clock_skew_ms)
    except InvalidPayload as exc:
        raise ApiError(400, exc.message, field=exc.field) from None
    answer = {"status": result.status.value, "event": event.event}
    if event.connector_id:
        answer["connector_id"] = event.connector_id
    if event.sync_id:
        answer["sync_id"] = event.sync_id
    if result.reason:
        answer["reason"] = result.reason
    return answer
