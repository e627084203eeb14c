"""Fivetran's API hook: its client, built from the connection Fivetran's providers use.

Real Airflow ``Connection`` objects, read from ``AIRFLOW_CONN_FIVETRAN_DEFAULT`` by
Airflow itself (no database): login = API key, password = API secret, whatever the type.
"""

from __future__ import annotations

import json

import pytest

from airflow_plugin.hooks import FivetranApiHook
from fivetran_events import ConfigurationError


class TestFromTheConnection:
    def test_the_providers_uri_gives_fivetrans_url_and_the_credentials(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``fivetran://KEY:SECRET@`` (percent-encoded as Airflow reads it)."""
        monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_DEFAULT", "fivetran://the-key:s%2F3cr%40t@")
        client = FivetranApiHook().get_conn()
        assert client.base_url == "https://api.fivetran.com"
        assert client.session.auth == ("the-key", "s/3cr@t")
        assert "s/3cr@t" not in repr(client) and "the-key" not in repr(client)

    @pytest.mark.parametrize(
        ("host", "port", "url"),
        [
            ("http://127.0.0.1", 8080, "http://127.0.0.1:8080"),
            ("http://127.0.0.1:9000/fivetran", None, "http://127.0.0.1:9000/fivetran"),
            ("proxy.internal", 8443, "https://proxy.internal:8443"),
            ("proxy.internal", None, "https://proxy.internal"),
        ],
    )
    def test_a_host_points_the_client_elsewhere(
        self, monkeypatch: pytest.MonkeyPatch, host: str, port: int | None, url: str
    ) -> None:
        """Any connection type (here ``http``, as JSON); the host, with or without scheme."""
        conn = {"conn_type": "http", "login": "key-1", "password": "secret-1", "host": host}
        if port:
            conn["port"] = str(port)
        monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_DEFAULT", json.dumps(conn))
        client = FivetranApiHook(timeout=3.0).get_conn()
        assert client.base_url == url and client.timeout == 3.0
        assert client.session.auth == ("key-1", "secret-1")

    def test_another_connection_id(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("AIRFLOW_CONN_MY_FIVETRAN", "fivetran://k2:s2@")
        assert FivetranApiHook("my_fivetran").get_conn().session.auth == ("k2", "s2")

    def test_missing_credentials_name_the_connection(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_DEFAULT", "fivetran://only-a-key@")
        with pytest.raises(
            ConfigurationError, match="'fivetran_default' needs the Fivetran API key"
        ):
            FivetranApiHook().get_conn()

    def test_a_host_that_is_no_url(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(
            "AIRFLOW_CONN_FIVETRAN_DEFAULT",
            '{"conn_type": "fivetran", "login": "k", "password": "s", "host": "ftp://x"}',
        )
        with pytest.raises(ConfigurationError, match=r"'fivetran_default'.*http:// or https://"):
            FivetranApiHook().get_conn()


class TestTheHook:
    def test_it_is_a_provider_hook_of_type_fivetran(self) -> None:
        """The attributes Airflow's connection UI and ``conn_name_attr`` lookups read."""
        assert (FivetranApiHook.conn_type, FivetranApiHook.default_conn_name) == (
            "fivetran",
            "fivetran_default",
        )
        assert FivetranApiHook.conn_name_attr == "fivetran_conn_id"
        assert FivetranApiHook("mine").fivetran_conn_id == "mine"

    def test_the_test_button_names_what_is_missing(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A connection without a secret fails the UI's test with a message, not a trace."""
        monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_DEFAULT", "fivetran://only-a-key@")
        ok, message = FivetranApiHook().test_connection()
        assert not ok and "needs the Fivetran API key" in message
