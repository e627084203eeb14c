"""What a sensor task's read takes from its connection and environment, in one round trip.

A sensor task runs in a fresh process: every millisecond of setup is part of its
duration, which a backfill multiplies (``python -m bench.sensor --backfill-cost``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis


def connection(uri: str, conn_id: str = "x"):  # type: ignore[no-untyped-def]
    from airflow_plugin.compat import Connection

    return Connection.from_uri(uri, conn_id=conn_id)


class TestDefaultsFromTheEnvironment:
    def test_defaults_follow_the_environment(
        self, dagtest_airflow: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Hooks read the FIVETRAN_EVENTS_* defaults, and see a change of them."""
        from airflow_plugin.hooks import config_from_connection

        monkeypatch.setenv("FIVETRAN_EVENTS_KEY_PREFIX", "once:")
        first = config_from_connection(connection("redis://127.0.0.1/0"))
        second = config_from_connection(connection("redis://127.0.0.1/1"))
        assert (first.key_prefix, second.key_prefix) == ("once:", "once:")
        monkeypatch.setenv("FIVETRAN_EVENTS_KEY_PREFIX", "twice:")
        assert config_from_connection(connection("redis://127.0.0.1/0")).key_prefix == "twice:"

    def test_extras_win_over_the_environment(self, dagtest_airflow: Path) -> None:
        """A connection's extras give prefix and staleness over the environment's."""
        from airflow_plugin.hooks import config_from_connection

        cfg = config_from_connection(
            connection("redis://127.0.0.1/0?key_prefix=x%3A&max_sync_duration_hours=2")
        )
        assert (cfg.key_prefix, cfg.max_sync_duration_ms) == ("x:", 2 * 3600 * 1000)

    def test_no_variables_gives_the_defaults(
        self, dagtest_airflow: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without FIVETRAN_EVENTS_* variables the defaults hold."""
        import os

        from airflow_plugin.hooks import config_from_connection
        from fivetran_events.keys import DEFAULT_PREFIX

        for name in [k for k in os.environ if k.upper().startswith("FIVETRAN_EVENTS_")]:
            monkeypatch.delenv(name)
        cfg = config_from_connection(connection("redis://127.0.0.1/0"))
        assert (cfg.key_prefix, cfg.max_sync_duration_ms) == (DEFAULT_PREFIX, 24 * 3600 * 1000)
        # A variable in any case is read, and checked, as pydantic-settings reads it.
        monkeypatch.setenv("fivetran_events_key_prefix", "lower:")
        assert config_from_connection(connection("redis://127.0.0.1/0")).key_prefix == "lower:"

    def test_webhook_only_setting_does_not_fail_the_hook(
        self, dagtest_airflow: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A bad variable only the worker reads (its Airflow URL) does not fail the hook."""
        from airflow_plugin.hooks import config_from_connection

        monkeypatch.setenv("FIVETRAN_EVENTS_AIRFLOW_URL", "ftp://not-http")
        monkeypatch.setenv("FIVETRAN_EVENTS_MAX_SYNC_DURATION_HOURS", "6")
        cfg = config_from_connection(connection("redis://127.0.0.1/0"))
        assert cfg.max_sync_duration_ms == 6 * 3600 * 1000

    def test_a_bad_default_still_names_its_variable(
        self, dagtest_airflow: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A bad FIVETRAN_EVENTS_KEY_PREFIX fails every read, not only the first."""
        from airflow_plugin.hooks import config_from_connection
        from fivetran_events import ConfigurationError

        monkeypatch.setenv("FIVETRAN_EVENTS_KEY_PREFIX", "has space")
        for _ in range(2):
            with pytest.raises(ConfigurationError, match="FIVETRAN_EVENTS_KEY_PREFIX"):
                config_from_connection(connection("redis://127.0.0.1/0"))


class TestExtrasReadOnce:
    def test_extras_are_not_masked_again(
        self, dagtest_airflow: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Reading the extras sends no mask request: Airflow's lookup masked them already.

        In a task process every ``mask_secret`` is a blocking request to the supervisor.
        """
        import airflow.sdk.log

        from airflow_plugin.hooks import config_from_connection

        masked: list[object] = []
        monkeypatch.setattr(airflow.sdk.log, "mask_secret", lambda s, n=None: masked.append(s))
        cfg = config_from_connection(
            connection("redis://127.0.0.1/0?key_prefix=m%3A&max_sync_duration_hours=3")
        )
        assert (cfg.key_prefix, cfg.max_sync_duration_ms) == ("m:", 3 * 3600 * 1000)
        assert masked == []

    def test_extras_that_are_not_an_object(self, dagtest_airflow: Path) -> None:
        """Unparsable extras read as none (as extra_dejson reads them); a JSON list is refused."""
        from airflow_plugin.compat import Connection
        from airflow_plugin.hooks import config_from_connection
        from fivetran_events.keys import DEFAULT_PREFIX

        def conn(extra: str) -> Connection:
            return Connection(conn_id="x", conn_type="redis", host="127.0.0.1", extra=extra)

        assert config_from_connection(conn("{not json")).key_prefix == DEFAULT_PREFIX
        with pytest.raises(ValueError, match="connection x: extra must be a JSON object, not list"):
            config_from_connection(conn("[1, 2]"))


class TestOneConnectionOneRead:
    def test_fresh_client_reads_without_handshake(
        self, dagtest_airflow: Path, client: redis.Redis
    ) -> None:
        """A task's fresh connection sends its read alone: no HELLO, CLIENT SETINFO or PING."""
        from airflow_plugin.hooks import FivetranEventsRedisHook
        from fivetran_events import Outcome

        client.config_resetstat()
        hook = FivetranEventsRedisHook()
        decision = hook.reader().decide("c1", 1_790_000_000_000)
        assert decision.outcome is Outcome.WAIT
        commands = {name.removeprefix("cmdstat_") for name in client.info("commandstats")}
        # The read's one pipeline (the completions, the newest other end and the
        # connector's lifecycle), no health-check PING; Redis 7.2+ answers CLIENT SETINFO,
        # older ones refuse it and other CLIENT subcommands (an error, still a round trip).
        reads = {"zrangebyscore", "zrevrangebyscore", "zrevrange", "hget"}
        assert commands - {"config|resetstat"} == reads
        assert client.info("errorstats") == {}
        assert hook.get_conn() is hook.reader().client
