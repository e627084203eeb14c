"""The Airflow connection behind Redis Sentinel: the same URL the webhook server takes.

A live primary, replica and three sentinels of the test's own (``testkit/sentinel.py``).
The hook reads the history through them (the ``url`` extra or the form's sentinel
fields), and the triggerer's shared listener follows a failover to the new primary.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fivetran_events import HistoryWriter
from fivetran_events.decision import Outcome
from fivetran_events.redis_url import client_from_url
from testkit.processes import poll_until
from testkit.sentinel import SentinelSetup, sentinel_setup
from testkit.support import at, ev

pytestmark = pytest.mark.slow

PREFIX = "ha:"


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[SentinelSetup]:
    with sentinel_setup(tmp_path / "redis") as setup:
        yield setup


def record(url: str, connector_id: str, sync_id: str, day: int = 3) -> None:
    client = client_from_url(url, socket_timeout=5)
    writer = HistoryWriter(client, PREFIX, 10**12)
    writer.record(ev(connector_id=connector_id, sync_id=sync_id, created=at(day)))
    client.close()


class TestHookThroughSentinel:
    def test_url_extra_and_form_fields_read_the_history(
        self, dagtest_airflow: Path, nodes: SentinelSetup, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Both spellings give the server's URL; the reader decides from the primary."""
        from airflow_plugin.hooks import FivetranEventsRedisHook

        record(nodes.url(), "c1", "s1")
        hosts = ",".join(f"127.0.0.1:{p}" for p in nodes.sentinel_ports)
        extras = {
            "HA_URL": {"url": nodes.url(), "key_prefix": PREFIX},
            "HA_FORM": {"sentinels": hosts, "sentinel_service": "svc", "key_prefix": PREFIX},
        }
        for conn_id, extra in extras.items():
            conn = {"conn_type": "fivetran_events", "extra": extra}
            monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id}", json.dumps(conn))
            hook = FivetranEventsRedisHook(conn_id.lower())
            assert hook.config.url == nodes.url()
            assert hook.test_connection() == (True, "Redis answered PING")
            decision = hook.reader().decide("c1", at(2))
            assert decision.outcome is Outcome.SUCCESS, decision

    def test_form_fields_with_passwords_and_tls(
        self, dagtest_airflow: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Password, TLS with a private CA, the sentinels' own password and TLS: the form's
        fields make the URL the server takes, and the reader decides through it."""
        from airflow_plugin.hooks import FivetranEventsRedisHook

        with sentinel_setup(
            tmp_path / "redis", password="p@ss word", sentinel_password="spw", tls=True
        ) as nodes:
            assert nodes.tls is not None
            record(nodes.url(), "c1", "s1")
            extra = {
                "sentinels": ",".join(f"127.0.0.1:{p}" for p in nodes.sentinel_ports),
                "sentinel_service": "svc",
                "sentinel_password": "spw",
                "sentinel_ssl": True,
                "ssl": True,
                "ssl_ca_certs": str(nodes.tls / "ca.crt"),
                "key_prefix": PREFIX,
            }
            conn = {"conn_type": "fivetran_events", "password": "p@ss word", "extra": extra}
            monkeypatch.setenv("AIRFLOW_CONN_HA_TLS", json.dumps(conn))
            hook = FivetranEventsRedisHook("ha_tls")
            assert hook.config.url.startswith("rediss+sentinel://")
            assert "p@ss" not in hook.config.where() and "spw" not in hook.config.where()
            assert hook.reader().decide("c1", at(2)).outcome is Outcome.SUCCESS

    def test_a_bad_sentinel_url_names_the_connection(
        self, dagtest_airflow: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from airflow_plugin.hooks import FivetranEventsRedisHook

        conn = {"conn_type": "fivetran_events", "extra": {"sentinels": "127.0.0.1:1"}}
        monkeypatch.setenv("AIRFLOW_CONN_HA_BAD", json.dumps(conn))
        with pytest.raises(ValueError, match=r"connection ha_bad: .*/service_name"):
            FivetranEventsRedisHook("ha_bad").config  # noqa: B018

    def test_the_shared_listener_follows_a_failover(
        self, dagtest_airflow: Path, nodes: SentinelSetup
    ) -> None:
        """After the primary's SIGKILL the hub subscribes on the promoted replica, and a
        write there wakes the connector's trigger."""
        from airflow_plugin.hooks import HistoryConfig
        from airflow_plugin.triggers._wakeups import hub_for

        cfg = HistoryConfig(url=nodes.url(), key_prefix=PREFIX, max_sync_duration_ms=1)
        promoted = nodes.replica.client()

        def subscribed_on_promoted() -> bool:
            try:
                return int(promoted.execute_command("PUBSUB", "NUMPAT")) == 1
            except redis.RedisError:
                return False

        async def scenario() -> None:
            hub = hub_for(cfg.url, PREFIX, cfg.to_redis_kwargs())
            woken = hub.register("c1")
            await hub.subscribed(10)
            woken.clear()
            record(nodes.url(), "c1", "before")
            await asyncio.wait_for(woken.wait(), 10)
            old = nodes.primary.port
            nodes.primary.stop(signal.SIGKILL)
            await asyncio.to_thread(
                poll_until, lambda: nodes.primary_port() != old, "the promotion", 30
            )
            await asyncio.to_thread(
                poll_until, subscribed_on_promoted, "the hub on the new primary", 30
            )
            await hub.subscribed(10)  # its wake-for-all on re-subscribing has happened
            woken.clear()  # so only the publish may set it now
            record(nodes.url(), "c1", "after", day=4)
            await asyncio.wait_for(woken.wait(), 10)
            await hub.unregister("c1", woken)

        asyncio.run(scenario())
