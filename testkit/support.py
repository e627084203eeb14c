"""Helpers shared by the tests: Fivetran payloads signed as Fivetran signs them."""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from fivetran_events import Event, as_text, parse_event
from fivetran_events.decision import Completion, Facts, Lifecycle, RunningSync
from fivetran_events.keys import ConnectorKeys
from fivetran_events.model import SIGNATURE_HEADER, sign
from fivetran_events.timeutil import iso, to_ms

#: At least 24 bytes each, as the settings require (settings.MIN_SECRET_BYTES).
SECRET = "test-webhook-secret-0123456789"
OTHER_SECRET = "rotated-webhook-secret-0123456789"
TOKEN = "test-api-token-0123456789abcdef"
#: The whole reason of a priority-first sync's end, as dbt_fivetran_log's connection_status
#: model quotes it (models/fivetran_platform__connection_status.sql): a LOG ``status`` row's.
PRIORITY_FIRST = (
    "We have rescheduled the connection to force flush data from the forward sync into "
    "your destination. This is intended behavior and means that the connection is "
    "working as expected."
)
UTC = timezone.utc


def cli_password(nbytes: int = 16) -> str:
    """Return a random password that a command line reads as a value, never as an option.

    ``secrets.token_urlsafe`` draws from ``A-Za-z0-9-_``: one in 64 begins with ``-``,
    and ``airflow users create --password -x...`` then fails on an unknown option.
    """
    return "p" + secrets.token_urlsafe(nbytes)


def at(day: int, hour: int = 0, minute: int = 0, month: int = 1, year: int = 2026) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def payload(
    event: str = "sync_end",
    connector_id: str = "assimilate_seem",
    created: datetime | str | None = None,
    sync_id: str | None = None,
    status: str | None = "SUCCESSFUL",
    new_names: bool = False,
    **data: Any,
) -> dict[str, Any]:
    """Build a payload shaped like a real capture of Fivetran's webhook."""
    created = created or datetime.now(UTC)
    body: dict[str, Any] = {
        "event": event,
        "created": created if isinstance(created, str) else iso(created),
        ("connection_type" if new_names else "connector_type"): "google_cloud_postgresql",
        ("connection_id" if new_names else "connector_id"): connector_id,
        ("connection_name" if new_names else "connector_name"): "ftar_pg",
        "destination_group_id": "inappropriate_implode",
    }
    if event in ("sync_start", "sync_end"):
        body["sync_id"] = sync_id or str(uuid.uuid4())
    if event == "sync_end":
        body["data"] = {"status": status, **data}
    elif data:
        body["data"] = data
    return body


def ev(event: str = "sync_end", **kw: Any) -> Event:
    """A parsed event, as the webhook hands it to the history writer."""
    return parse_event(encode(payload(event, **kw)))


def conn_uri(redis_url: str, prefix: str, **extra: str) -> str:
    """The ``AIRFLOW_CONN_...`` URI of the history's Redis with its key prefix."""
    query = "&".join(
        f"{k}={quote(str(v), safe='')}" for k, v in {"key_prefix": prefix, **extra}.items()
    )
    return f"{redis_url}?{query}"


def pattern_listeners(client: Any) -> int:
    """How many Redis connections hold a PSUBSCRIBE (a triggerer's shared listener is one).

    Connections, not ``PUBSUB NUMPAT``: that counts distinct patterns, and two triggerers
    listening on the same prefix are one pattern.
    """
    return len(pattern_listener_ids(client))


def pattern_listener_ids(client: Any) -> set[str]:
    """The client ids of the connections holding a PSUBSCRIBE.

    A new id means a new subscription, whatever older ones linger: a count can stay
    level when one listener closes late while another subscribes.
    """
    return {str(c["id"]) for c in client.client_list() if int(c.get("psub", 0)) > 0}


def encode(body: dict[str, Any] | bytes) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def signed(body: dict[str, Any] | bytes, secret: str = SECRET) -> tuple[bytes, dict[str, str]]:
    """Return the raw body and the headers Fivetran would send with it."""
    raw = encode(body)
    return raw, {SIGNATURE_HEADER: sign(raw, secret), "Content-Type": "application/json"}


#: Where Fivetran POSTs its webhooks.
WEBHOOK_PATH = "/webhooks/fivetran"


def post_signed(
    http: Any,
    body: dict[str, Any] | bytes,
    secret: str = SECRET,
    headers: dict[str, str] | None = None,
) -> Any:
    """POST ``body`` to the webhook signed as Fivetran signs it; return the response.

    ``http`` is the app's Flask test client (``http`` fixture); ``headers`` add to or
    replace the signed request's own.
    """
    raw, signed_headers = signed(body, secret)
    return http.post(WEBHOOK_PATH, data=raw, headers={**signed_headers, **(headers or {})})


def deliver(http: Any, body: dict[str, Any] | bytes) -> dict[str, Any]:
    """Deliver a signed event that must be accepted (200); return the webhook's JSON."""
    resp = post_signed(http, body)
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()  # type: ignore[no-any-return]


def answer(resp: Any) -> dict[str, Any]:
    """The JSON object a response carries (failing the test when it carries none)."""
    data = resp.get_json(silent=True)
    assert isinstance(data, dict), resp.get_data(as_text=True)[:500]
    return data


def job_sync_id(client: Any, job: Any, prefix: str = "test:") -> str:
    """The sync id of a forwarding job (its kwargs name a delivery record)."""
    from fivetran_events.keys import delivery_key

    value = client.hget(delivery_key(prefix, job.kwargs["delivery"]), "sync_id")
    return as_text(value)


def days(n: float) -> timedelta:
    return timedelta(days=n)


def recorded_ends(client: Any, keys: ConnectorKeys) -> int:
    """Count the sync_ends recorded in a connector's history (its three completion sets)."""
    return sum(int(client.zcard(k)) for k in (keys.ok, keys.fail, keys.other))


def lose_change_messages(monkeypatch: Any) -> None:
    """Make this process's history writes publish nothing, as if each message were lost.

    The write script publishes on the channel it is given and on none when that is
    empty; the writer takes the channel from ``writer.history_keys`` (cached per
    connector, so patching ``ConnectorKeys.channel`` would miss a connector written
    before in this process).
    """
    from fivetran_events.history import writer

    real = writer.history_keys
    monkeypatch.setattr(writer, "history_keys", lambda prefix, cid: (real(prefix, cid)[0], ""))


def facts_from_history(
    completions: Iterable[Completion],
    starts: dict[str, int],
    running: RunningSync | None,
    target: datetime | int,
    lifecycle: Lifecycle | None = None,
) -> Facts:
    """Build the facts of a whole in-memory history, as the reader's reads would."""
    target_ms = target if isinstance(target, int) else to_ms(target)
    ordered = [
        c
        if c.started_ms is not None or c.sync_id not in starts
        else replace(c, started_ms=starts[c.sync_id])
        for c in sorted(completions, key=Completion.order_key)
    ]
    real = [c for c in ordered if c.succeeded or c.failed]
    others = [c for c in ordered if not (c.succeeded or c.failed)]
    after = [c for c in real if c.ended_ms >= target_ms]
    before = [c for c in real if c.ended_ms < target_ms]
    return Facts(
        target_ms=target_ms,
        successes_from_target=tuple(c for c in after if c.succeeded),
        first_failure_from_target=next((c for c in after if c.failed), None),
        latest_before_target=before[-1] if before else None,
        running=running,
        latest_other=others[-1] if others else None,
        lifecycle=lifecycle,
    )
