"""A worker pool against a real Airflow 3: what each member pays before its first POST.

Each member of ``fivetran-events worker --concurrency N`` is a process with its own
Airflow client. These tests show that a member fetches its token when it starts (not
inside a delivery's time) and finds the asset ids another member looked up in Redis, so
the pool asks Airflow once per URI and cache period.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any
from urllib.parse import urlparse

import pytest
import requests

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryState
from fivetran_events.keys import asset_id_key, delivery_id
from testkit.airflow_harness import AirflowServer
from testkit.forward_support import forwarder, post_event
from testkit.processes import free_port, poll_until
from webhook_app.forwarding.forwarder import Forwarder

from .forwarding import events_of, uri

pytestmark = pytest.mark.timeout(480)

CID = "e2e_conn"


def known_asset(airflow3: AirflowServer) -> int:
    """Wait until Airflow lists the connector's asset; return its id.

    Only the api-server matters here, so this does not use ``wait_for_asset``, which
    also fails when any other component has exited (it did once in a session, right
    after ``test_forward_faults``; which component and why was not found).
    """
    return poll_until(lambda: airflow3.asset_id(uri(CID)), f"asset {uri(CID)}", 120)


def member(af_settings: Settings, airflow3: AirflowServer) -> tuple[Forwarder, list[str]]:
    """A pool member's Forwarder and the list of the requests its client sends to Airflow."""
    fw = forwarder(af_settings, airflow3.url, airflow3.username, airflow3.password)
    assert fw.airflow is not None
    sent: list[str] = []

    def record(resp: requests.Response, *args: Any, **kwargs: Any) -> None:
        sent.append(f"{resp.request.method} {urlparse(resp.url).path}")

    fw.airflow.session.hooks["response"].append(record)
    return fw, sent


def deliver_one(http: Any, fw: Forwarder) -> tuple[str, str]:
    """Record one success through the webhook and attempt its delivery with ``fw``."""
    sid = f"pool-{uuid.uuid4()}"
    post_event(http, connector_id=CID, sync_id=sid)
    did = delivery_id(CID, sid, uri(CID))
    result = fw.attempt(did)
    assert result.outcome.value == "delivered", result
    return sid, did


class TestPoolMembers:
    def test_a_member_finds_the_asset_id_another_looked_up(
        self, http: Any, airflow3: AirflowServer, af_settings: Settings
    ) -> None:
        """The second member's first delivery sends its POST alone: no lookup of its own."""
        known_asset(airflow3)
        first, first_sent = member(af_settings, airflow3)
        second, second_sent = member(af_settings, airflow3)
        deliver_one(http, first)
        assert first_sent.count("GET /api/v2/assets") == 1
        sid, _ = deliver_one(http, second)
        assert "GET /api/v2/assets" not in second_sent, second_sent
        assert second_sent.count("POST /api/v2/assets/events") == 1
        assert len(events_of(airflow3, CID, sid)) == 1

    def test_a_stale_shared_id_heals(
        self, http: Any, airflow3: AirflowServer, af_settings: Settings
    ) -> None:
        """A shared id Airflow does not know (a deleted asset) gets a 404, a lookup, the POST."""
        real = known_asset(airflow3)
        fw, sent = member(af_settings, airflow3)
        key = asset_id_key(af_settings.key_prefix, uri(CID))
        fw.redis.set(key, "987654321", px=60_000)
        sid, did = deliver_one(http, fw)
        assert sent.count("GET /api/v2/assets") == 1
        assert int(fw.redis.get(key) or 0) == real
        assert 0 < fw.redis.pttl(key) <= 300_000  # the client's cache period, not for ever
        d = fw.store.get(did)
        assert d is not None and d.state is DeliveryState.DELIVERED
        assert [e["id"] for e in events_of(airflow3, CID, sid)] == [int(d.fields["event_id"])]

    def test_warmed_member_posts_without_token_or_version_requests(
        self,
        http: Any,
        airflow3: AirflowServer,
        af_settings: Settings,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """After warm_up (the worker calls it as it starts) a delivery pays the POST only."""
        known_asset(airflow3)
        fw, sent = member(af_settings, airflow3)
        assert fw.warm_up() is True
        assert sent == ["GET /api/v2/monitor/health", "POST /auth/token"]
        sent.clear()
        fw.redis.set(  # as if another member had looked the asset up
            asset_id_key(af_settings.key_prefix, uri(CID)), str(airflow3.asset_id(uri(CID)))
        )
        with caplog.at_level(logging.INFO, logger="webhook_app.forwarding.recorder"):
            deliver_one(http, fw)
        assert sent == ["POST /api/v2/assets/events"]
        # Its log line says where the attempt's time went.
        line = next(r.getMessage() for r in caplog.records if "delivered as" in r.getMessage())
        assert "prepare " in line and "mark " in line and "POST " in line


class TestWarmUpFailure:
    def test_unreachable_airflow_is_logged_not_raised(
        self, settings: Settings, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A worker starting while Airflow is down starts all the same (attempts retry)."""
        fw = forwarder(settings, f"http://127.0.0.1:{free_port()}", "u", "p")
        with caplog.at_level(logging.WARNING):
            assert fw.warm_up() is False
        assert "could not reach Airflow" in caplog.text
