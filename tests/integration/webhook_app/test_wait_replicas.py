"""FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS: no 2xx before that many replicas hold the delivery,
and no POST to Airflow before they hold the attempt's in-flight mark."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from fivetran_events import Settings, WriteStatus, parse_event
from fivetran_events.keys import ConnectorKeys, delivery_id
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import CID, URI, forwarder, post_event
from testkit.own_redis import OwnRedis, own_redis
from testkit.processes import poll_until
from testkit.support import ev, payload, post_signed, signed
from webhook_app import create_app
from webhook_app.errors import ApiError
from webhook_app.probes import confirm_replicas
from webhook_app.state import state


def waiting(settings: Settings, url: str, replicas: int = 1, timeout_ms: int = 50) -> Settings:
    """Settings that wait for ``replicas``: 50 ms where none can confirm (the wait is the
    test's cost); where one can, WAIT answers as soon as it has, so give a busy machine time."""
    return settings.model_copy(
        update={
            "redis_url": url,
            "redis_wait_replicas": replicas,
            "redis_wait_timeout_ms": timeout_ms,
        }
    )


@contextmanager
def replicated(tmp_path: Path) -> Iterator[OwnRedis]:
    """A primary of the test's own with one replica in sync; both stopped after."""
    with (
        own_redis(tmp_path / "primary") as primary,
        own_redis(tmp_path / "replica", "--replicaof", "127.0.0.1", str(primary.port)) as replica,
    ):
        poll_until(
            lambda: replica.client().info("replication")["master_link_status"] == "up",
            "the replica to sync",
        )
        yield primary


class TestWaitForReplicas:
    def test_too_few_replicas_is_503_and_the_redelivery_waits_again(
        self, settings: Settings, redis_url: str, client: redis.Redis
    ) -> None:
        """The suite's Redis has no replica: recorded, yet 503 with Retry-After, twice."""
        http = create_app(waiting(settings, redis_url)).test_client()
        body = payload(sync_id="s-wait")
        for _ in range(2):  # the first delivery and Fivetran's retry (a duplicate)
            resp = post_signed(http, body)
            assert resp.status_code == 503, resp.get_json()
            assert resp.headers["Retry-After"] == str(settings.retry_after_seconds)
            assert "0 of 1 Redis replicas" in resp.get_json()["error"]
        ready = http.get("/readyz")  # every delivery would be 503: not ready either
        assert ready.status_code == 503 and "0 of 1 Redis replicas" in ready.get_json()["error"]
        event = parse_event(signed(body)[0])
        seen = ConnectorKeys("test:", event.connector_id).seen
        assert client.zscore(seen, event.dedup_id) is not None  # on the primary all along

    def test_off_by_default_and_ignored_events_never_wait(
        self, settings: Settings, redis_url: str
    ) -> None:
        assert settings.redis_wait_replicas == 0
        assert post_signed(create_app(settings).test_client(), payload()).status_code == 200
        http = create_app(waiting(settings, redis_url)).test_client()
        test_event = {"event": "test_event", "created": "2026-01-01T00:00:00Z"}
        assert post_signed(http, test_event).status_code == 200

    def test_a_replica_in_sync_confirms_it(self, settings: Settings, tmp_path: Path) -> None:
        with replicated(tmp_path) as primary:
            http = create_app(waiting(settings, primary.url, timeout_ms=5000)).test_client()
            resp = post_signed(http, payload(sync_id="s-replicated"))
            assert resp.status_code == 200 and resp.get_json()["status"] == "recorded"
            assert http.get("/readyz").status_code == 200
            too_many = create_app(waiting(settings, primary.url, replicas=2)).test_client()
            assert post_signed(too_many, payload(sync_id="s-two")).status_code == 503
            # A primary that answers the WAIT without holding the delivery (a failover
            # between the write and the WAIT) confirms nothing.
            app = create_app(waiting(settings, primary.url, timeout_ms=5000))
            with app.app_context(), pytest.raises(ApiError) as info:
                confirm_replicas(state(), ev(sync_id="never-written"), WriteStatus.RECORDED)
            assert info.value.status_code == 503 and "does not hold it" in info.value.message


class TestTheWorkersMarkWaitsToo:
    """The worker's in-flight mark, written before a POST, waits for the same replicas: a
    failover must not forget an attempt whose event may be in Airflow."""

    def test_too_few_replicas_posts_nothing_and_retries(
        self, settings: Settings, redis_url: str, airflow2_standin: Airflow2StandIn
    ) -> None:
        airflow2_standin.add_dataset(URI)
        http = create_app(settings).test_client()  # the webhook itself waits for none here
        post_event(http, connector_id=CID, sync_id="s-mark")
        fw = forwarder(
            waiting(settings, redis_url),
            airflow2_standin.url,
            airflow2_standin.username,
            airflow2_standin.password,
        )
        did = delivery_id(CID, "s-mark", URI)
        result = fw.attempt(did)
        assert result.outcome == "retrying"
        assert "0 of 1 Redis replicas confirmed the attempt's mark" in (result.reason or "")
        assert airflow2_standin.posts == []
        record = fw.store.get(did)
        assert record is not None and record.get("inflight_ms") is None  # nothing is open

    def test_a_replica_in_sync_lets_it_post_once(
        self, settings: Settings, tmp_path: Path, airflow2_standin: Airflow2StandIn
    ) -> None:
        airflow2_standin.add_dataset(URI)
        with replicated(tmp_path) as primary:
            on_primary = waiting(settings, primary.url, timeout_ms=5000)
            post_event(create_app(on_primary).test_client(), connector_id=CID, sync_id="s-ok")
            fw = forwarder(
                on_primary,
                airflow2_standin.url,
                airflow2_standin.username,
                airflow2_standin.password,
            )
            assert fw.attempt(delivery_id(CID, "s-ok", URI)).outcome == "delivered"
            assert len(airflow2_standin.posts) == 1
