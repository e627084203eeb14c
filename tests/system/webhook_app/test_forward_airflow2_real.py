"""The Airflow 2 (``/api/v1``, basic auth) path against a real Airflow 2.11 webserver."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryState
from fivetran_events.keys import delivery_id
from testkit.airflow2_harness import Airflow2Server
from testkit.forward_support import forwarder, post_event, run_worker, syncs
from webhook_app.airflow_client import AirflowClient
from webhook_app.exceptions import AirflowRejected, AssetNotFound

# Includes installing Airflow 2 into its own venv on a fresh machine (about a minute).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

CID = "af2_conn"
URI = f"fivetran://connector/{CID}"


class TestRealAirflow2:
    def test_client_speaks_v1(self, airflow2: Airflow2Server) -> None:
        """Detects v1, finds the dataset, posts with extra and finds the event again."""
        c = AirflowClient(airflow2.url, airflow2.username, airflow2.password)
        assert c.version() == "2"
        assert c.known(URI)
        assert not c.known("fivetran://connector/nobody")
        since = datetime.now(timezone.utc) - timedelta(seconds=5)
        sid = f"v1-{uuid.uuid4()}"
        ev = c.post_event(URI, {"sync_id": sid, "connector_id": CID})
        assert ev.uri == URI and ev.extra["sync_id"] == sid
        found = c.find_event(URI, since, {"sync_id": sid})
        assert found is not None and found.id == ev.id
        with pytest.raises(AssetNotFound, match="404"):
            c.post_event("fivetran://connector/nobody", {})
        with pytest.raises(AirflowRejected, match=r"401.*auth_backends includes airflow\.api"):
            AirflowClient(airflow2.url, airflow2.username, "wrong").post_event(URI, {})

    def test_webhook_to_airflow2(
        self, http: Any, settings: Settings, airflow2: Airflow2Server
    ) -> None:
        """A signed sync_end becomes one dataset event in Airflow 2, visible in the API."""
        fw = forwarder(settings, airflow2.url, airflow2.username, airflow2.password)
        sid = f"wh-{uuid.uuid4()}"
        post_event(http, connector_id=CID, sync_id=sid)
        post_event(http, connector_id="af2_unknown", sync_id=sid)
        run_worker(fw)
        d = fw.store.get(delivery_id(CID, sid, URI))
        assert d is not None and d.state is DeliveryState.DELIVERED
        assert syncs(http, CID)[0]["forwarding"][0]["airflow_event_id"] == int(d.fields["event_id"])
        assert fw.airflow is not None
        found = fw.airflow.find_event(
            URI, datetime.now(timezone.utc) - timedelta(minutes=5), {"sync_id": sid}
        )
        assert found is not None and found.extra["status"] == "SUCCESSFUL"
        other = fw.store.get(delivery_id("af2_unknown", sid, "fivetran://connector/af2_unknown"))
        assert other is not None and other.state is DeliveryState.UNDELIVERED
