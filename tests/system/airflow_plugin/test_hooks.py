"""The history's Redis as an Airflow connection: URI forms, extras, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask.testing import FlaskClient

from testkit.support import at, conn_uri

from .dagtest import sync


def connection(uri: str, conn_id: str = "x"):  # type: ignore[no-untyped-def]
    from airflow_plugin.compat import Connection

    return Connection.from_uri(uri, conn_id=conn_id)


class TestConfigFromConnection:
    def test_uri_with_password_db_and_prefix(self, dagtest_airflow: Path) -> None:
        """A redis:// URI carries auth, database number and the key prefix (URL-encoded)."""
        from airflow_plugin.hooks import config_from_connection

        cfg = config_from_connection(
            connection(
                "redis://:s%40cret@10.1.2.3:6380/2?key_prefix=prod%3A&max_sync_duration_hours=6"
            )
        )
        assert cfg.url == "redis://:s%40cret@10.1.2.3:6380/2"
        assert cfg.key_prefix == "prod:"
        assert cfg.max_sync_duration_ms == 6 * 3600 * 1000

    def test_defaults_follow_the_server_settings(
        self, dagtest_airflow: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without extras the prefix and staleness limit are the FIVETRAN_EVENTS_* ones."""
        from airflow_plugin.hooks import config_from_connection

        monkeypatch.setenv("FIVETRAN_EVENTS_KEY_PREFIX", "shared:")
        cfg = config_from_connection(connection("redis://127.0.0.1"))
        assert cfg.url == "redis://127.0.0.1:6379/0"
        assert cfg.key_prefix == "shared:"
        assert cfg.max_sync_duration_ms == 24 * 3600 * 1000

    def test_tls(self, dagtest_airflow: Path) -> None:
        """rediss:// or extra ssl=true gives a TLS URL."""
        from airflow_plugin.hooks import config_from_connection

        assert config_from_connection(connection("rediss://h:1/0")).url.startswith("rediss://")
        assert config_from_connection(connection("redis://h:1/0?ssl=true")).url.startswith(
            "rediss://"
        )

    def test_bad_db(self, dagtest_airflow: Path) -> None:
        from airflow_plugin.hooks import config_from_connection

        with pytest.raises(ValueError, match="database number"):
            config_from_connection(connection("redis://h:1/zero"))


class TestHook:
    def test_default_conn_id_from_environment(
        self, dagtest_airflow: Path, http: FlaskClient
    ) -> None:
        """AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS (a redis:// URI) is the default connection."""
        from airflow_plugin.hooks import DEFAULT_CONN_ID, FivetranEventsRedisHook

        sync(http, "c1", at(3, 5), sync_id="s1")
        hook = FivetranEventsRedisHook()
        assert DEFAULT_CONN_ID == "fivetran_events_redis" == hook.default_conn_name
        assert hook.test_connection() == (True, "Redis answered PING")
        assert hook.get_conn() is hook.get_conn()
        facts = hook.reader().facts("c1", 0)
        assert [c.sync_id for c in facts.successes_from_target] == ["s1"]

    def test_last_success(self, dagtest_airflow: Path, http: FlaskClient) -> None:
        """last_success finds the newest success at or before a time, ignoring failures."""
        from airflow_plugin.hooks import FivetranEventsRedisHook
        from fivetran_events.timeutil import to_ms

        sync(http, "c1", at(3), sync_id="ok1")
        sync(http, "c1", at(5), "FAILURE", sync_id="bad")
        sync(http, "c1", at(7), sync_id="ok2")
        hook = FivetranEventsRedisHook()
        first, second = hook.last_success("c1", to_ms(at(6))), hook.last_success("c1", to_ms(at(7)))
        assert first is not None and first.sync_id == "ok1"
        assert second is not None and second.sync_id == "ok2"
        assert hook.last_success("c1", to_ms(at(2))) is None

    def test_unreachable_redis(
        self, dagtest_airflow: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """test_connection says why when Redis does not answer."""
        from airflow_plugin.hooks import FivetranEventsRedisHook

        monkeypatch.setenv("AIRFLOW_CONN_NOWHERE", conn_uri("redis://127.0.0.1:1/0", "p:"))
        ok, message = FivetranEventsRedisHook("nowhere").test_connection()
        assert not ok and "cannot reach Redis" in message
