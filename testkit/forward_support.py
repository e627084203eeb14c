"""Helpers for the forwarding tests: post a signed webhook, run a worker, read deliveries."""

from __future__ import annotations

from typing import Any

import pytest
from rq import SimpleWorker

from fivetran_events import Settings
from webhook_app.forward import Forwarder
from webhook_app.jobs import build_forwarder, configure

from .airflow2_standin import Airflow2
from .support import TOKEN, payload, signed

#: The connector the stand-in tests forward, and its dataset URI.
CID = "assimilate_seem"
URI = f"fivetran://connector/{CID}"


# Import these two into a test module to have ``af2`` know URI and ``fw`` talk to it.
@pytest.fixture(name="af2")
def af2_with_dataset(af2: Airflow2) -> Airflow2:
    """The stand-in (tests/webhook_app/conftest.py) knowing the connector's dataset."""
    af2.add_dataset(URI)
    return af2


@pytest.fixture(name="fw")
def fw_on_af2(settings: Settings, af2: Airflow2) -> Forwarder:
    """A worker's Forwarder talking to that stand-in."""
    return forwarder(settings, af2.url, af2.username, af2.password)


def post_event(http: Any, **kwargs: Any) -> dict[str, Any]:
    """POST a signed Fivetran event to the webhook; return the JSON answer."""
    raw, headers = signed(payload(**kwargs))
    resp = http.post("/webhooks/fivetran", data=raw, headers=headers)
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()  # type: ignore[no-any-return]


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
    """Run every queued job in this process (RQ's SimpleWorker in burst mode)."""
    configure(fw)
    try:
        SimpleWorker([fw.queue], connection=fw.redis).work(burst=True, with_scheduler=False)
    finally:
        configure(None)


def syncs(http: Any, connector_id: str) -> list[dict[str, Any]]:
    resp = http.get(
        f"/api/connectors/{connector_id}/syncs", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()["syncs"]  # type: ignore[no-any-return]
