"""Helpers for the forwarding tests: post a signed webhook, run a worker, read deliveries."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from fivetran_events import Settings
from fivetran_events.keys import job_id_prefix
from webhook_app.airflow_client import AirflowClient
from webhook_app.forwarding.forwarder import Forwarder
from webhook_app.worker.build import build_forwarder
from webhook_app.worker.rq_worker import ForwardingWorker

from .support import TOKEN, deliver, payload

#: The connector the stand-in tests forward, and its dataset URI.
CID = "assimilate_seem"
URI = f"fivetran://connector/{CID}"


def post_event(http: Any, **kwargs: Any) -> dict[str, Any]:
    """POST a signed Fivetran event built from ``kwargs`` (``payload``); return its JSON."""
    return deliver(http, payload(**kwargs))


def forwarder(
    settings: Settings, url: str, username: str, password: str, **overrides: Any
) -> Forwarder:
    s = settings.model_copy(
        update={
            "airflow_url": url,
            "airflow_username": username,
            "airflow_password": password,
            **overrides,
        }
    )
    s = Settings(**{k: getattr(s, k) for k in Settings.model_fields})
    return build_forwarder(s)


def run_worker(fw: Forwarder) -> None:
    """Queue what is due, then run every queued job in this process with ``fw`` (the CLI's
    worker in burst mode: it sweeps as it starts, then works the queue empty)."""
    fw.sweep()
    ForwardingWorker(fw).work(burst=True, with_scheduler=False)


def syncs(http: Any, connector_id: str) -> list[dict[str, Any]]:
    resp = http.get(
        f"/api/connectors/{connector_id}/syncs", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()["syncs"]  # type: ignore[no-any-return]


def present_token(client: AirflowClient, token: str) -> None:
    """Make ``client`` send ``token`` as if it were fresh (an expired one, to see a 401)."""
    client._token = token
    client._token_expires = time.time() + 3600


def forward_job_id(prefix: str, delivery: str, tag: str | int | None = None) -> str:
    """Name an attempt's RQ job as the store's claim (``_lua.CLAIM_DUE``) does (SHA-1:
    Lua in Redis has it), under the deployment's key ``prefix``."""
    digest = hashlib.sha1(delivery.encode(), usedforsecurity=False).hexdigest()[:24]
    name = f"{job_id_prefix(prefix)}fwd-{digest}"
    return name if tag is None else f"{name}-{tag}"
