"""The forwarding package's seams: what the web process loads, the state index, bugs.

Real redis-server and the real Flask app; Airflow is the Airflow 2 stand-in
(testkit/airflow2_standin.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryState
from fivetran_events.keys import delivery_id, delivery_state_key
from testkit.forward_support import (
    CID,
    URI,
    post_event,
    run_worker,
)
from webhook_app.forwarding.forwarder import Forwarder
from webhook_app.forwarding.replay import Replayer

pytestmark = pytest.mark.timeout(60)

#: Modules only a worker needs: the HTTP clients and the attempt logic (OpenLineage's too).
WORKER_SIDE = (
    "requests",
    "webhook_app.airflow_client",
    "webhook_app.forwarding.forwarder",
    "webhook_app.forwarding.asset",
    "openlineage",
    "webhook_app.forwarding.lineage",
)


class TestWebProcessImports:
    def test_the_app_and_a_recorded_success_load_no_worker_side(self, redis_url: str) -> None:
        """The web process creates deliveries, OpenLineage's too, without ever loading an
        HTTP client or the OpenLineage client."""
        code = f"""
import sys
from testkit.support import payload, signed, SECRET
from webhook_app import create_app
app = create_app(redis_url={redis_url!r}, webhook_secrets=[SECRET],
                 airflow_url="http://127.0.0.1:9", key_prefix="imports:", lineage="on")
for body in (payload("sync_start", sync_id="imports"), payload(sync_id="imports")):
    raw, headers = signed(body)
    resp = app.test_client().post("/webhooks/fivetran", data=raw, headers=headers)
    assert resp.status_code == 200, resp.get_json()
import redis
assert redis.Redis.from_url({redis_url!r}).zcard("imports:fwd:due") == 3
print(sorted(m for m in {WORKER_SIDE!r} if m in sys.modules))
"""
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=Path(__file__).parents[3],
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[]"


def members(client: redis.Redis, settings: Settings) -> dict[str, list[str]]:
    """Return each indexed state's delivery ids."""
    return {
        s.value: sorted(
            m.decode()
            for m in cast(
                "list[bytes]",
                client.zrange(delivery_state_key(settings.key_prefix, s.value), 0, -1),
            )
        )
        for s in DeliveryState
        if s is not DeliveryState.DELIVERED
    }


class TestStateIndex:
    def test_the_index_follows_every_change_of_state(
        self, http: Any, fw: Forwarder, client: redis.Redis, settings: Settings
    ) -> None:
        """Create: pending; 404: undelivered; replay: pending again; delivered: no index."""
        post_event(http, connector_id="nodag", sync_id="n1")
        nodag = delivery_id("nodag", "n1", "fivetran://connector/nodag")
        empty: dict[str, list[str]] = {
            "pending": [],
            "retrying": [],
            "undelivered": [],
            "failed": [],
        }
        assert members(client, settings) == {**empty, "pending": [nodag]}
        run_worker(fw)
        assert members(client, settings) == {**empty, "undelivered": [nodag]}
        assert Replayer.of(fw).replay([nodag]) == [nodag]
        assert members(client, settings) == {**empty, "pending": [nodag]}
        post_event(http, sync_id="ok1")
        run_worker(fw)
        assert fw.store.get(delivery_id(CID, "ok1", URI)).state is DeliveryState.DELIVERED  # type: ignore[union-attr]
        assert members(client, settings) == {**empty, "undelivered": [nodag]}

    def test_an_expired_record_leaves_the_index(
        self, http: Any, fw: Forwarder, client: redis.Redis, settings: Settings
    ) -> None:
        """An attempt that finds its delivery gone drops it from the indexes too."""
        post_event(http, sync_id="gone")
        did = delivery_id(CID, "gone", URI)
        assert members(client, settings)["pending"] == [did]
        client.delete(fw.store.key(did))
        assert fw.attempt(did).outcome == "missing"
        assert not any(members(client, settings).values())


class TestOwnBugs:
    def test_a_bug_of_ours_fails_the_attempt_instead_of_retrying(
        self, http: Any, fw: Forwarder, client: redis.Redis
    ) -> None:
        """Only Airflow's bad answers are retried; our own KeyError surfaces at once."""
        post_event(http, sync_id="bug")
        did = delivery_id(CID, "bug", URI)
        # An earlier attempt's mark and an extra without the sync id: the lookup's own
        # code fails, not Airflow.
        client.hset(fw.store.key(did), mapping={"inflight_ms": "1", "extra": json.dumps({"x": 1})})
        with pytest.raises(KeyError):
            fw.attempt(did)
        d = fw.store.get(did)
        assert d is not None and d.state is DeliveryState.PENDING and not d.get("reason")
