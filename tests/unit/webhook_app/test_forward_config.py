"""Dataset URIs, forwarding settings and credentials (pure; no servers).

The URI function lives in fivetran_events (the Airflow side builds the same URIs);
its tests sit here with the rest of issue 3's so that tests/fivetran_events stays as
the core's owners left it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from fivetran_events import ConfigurationError, Settings, load_settings
from fivetran_events.http import retry_after_seconds
from fivetran_events.uris import DEFAULT_URI_TEMPLATE, dataset_uri, dataset_uris, load_uri_map
from webhook_app.airflow_auth import credentials
from webhook_app.forwarding.recorder import backoff_seconds


class TestDatasetUris:
    def test_default_template(self) -> None:
        """Without configuration a connector's URI is fivetran://connector/<id>."""
        assert load_uri_map().uris("assimilate_seem") == ["fivetran://connector/assimilate_seem"]
        assert DEFAULT_URI_TEMPLATE == "fivetran://connector/{connector_id}"

    def test_template_fields(self) -> None:
        """A template may use the connector's name, type and group."""
        m = load_uri_map("fivetran://{group_id}/{connector_type}/{connector_id}")
        assert m.uris("c1", "n", "postgres", "g1") == ["fivetran://g1/postgres/c1"]

    def test_unknown_placeholder_is_refused(self) -> None:
        """A typo in the template is a configuration error naming the variable."""
        with pytest.raises(ConfigurationError, match="DATASET_URI_TEMPLATE"):
            load_uri_map("fivetran://{conector_id}")

    def test_toml_mapping(self, tmp_path: Path) -> None:
        """A TOML mapping gives a connector one or several URIs; others keep the template."""
        f = tmp_path / "map.toml"
        f.write_text(
            '[connectors]\nc1 = ["s3://lake/{connector_id}", "pg://wh/orders"]\n'
            'c2 = "pg://wh/customers"\n'
        )
        m = load_uri_map(mapping_file=f)
        assert m.uris("c1") == ["s3://lake/c1", "pg://wh/orders"]
        assert m.uris("c2") == ["pg://wh/customers"]
        assert m.uris("c3") == ["fivetran://connector/c3"]

    def test_yaml_mapping(self, tmp_path: Path) -> None:
        """YAML mapping files work the same."""
        f = tmp_path / "map.yaml"
        f.write_text("connectors:\n  c1:\n    - s3://lake/c1\n  c2: pg://wh/c2\n")
        assert dataset_uris("c1", mapping_file=f) == ["s3://lake/c1"]
        assert dataset_uri("c2", mapping_file=f) == "pg://wh/c2"

    def test_bad_mapping_says_what_to_fix(self, tmp_path: Path) -> None:
        """A mapping without a connectors table, or with a non-URI, is refused clearly."""
        f = tmp_path / "map.toml"
        f.write_text("[other]\n")
        with pytest.raises(ConfigurationError, match="'connectors' table"):
            load_uri_map(mapping_file=f)
        f.write_text('[connectors]\nc1 = "not a uri"\n')
        with pytest.raises(ConfigurationError, match="c1"):
            load_uri_map(mapping_file=f)
        with pytest.raises(ConfigurationError, match="cannot read"):
            load_uri_map(mapping_file=tmp_path / "missing.toml")

    def test_environment_drives_dataset_uris(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With no arguments the URIs come from the same variables the worker reads."""
        monkeypatch.setenv("FIVETRAN_EVENTS_DATASET_URI_TEMPLATE", "x://{connector_id}")
        assert dataset_uris("c9") == ["x://c9"]

    def test_several_uris_need_dataset_uris(self, tmp_path: Path) -> None:
        f = tmp_path / "map.toml"
        f.write_text('[connectors]\nc1 = ["a://1", "b://2"]\n')
        with pytest.raises(ConfigurationError, match="dataset_uris"):
            dataset_uri("c1", mapping_file=f)


class TestSettings:
    def test_airflow_url_must_be_http(self) -> None:
        with pytest.raises(ValueError, match="http"):
            Settings(airflow_url="127.0.0.1:8080")

    def test_retry_window_defaults_to_more_than_a_day(self) -> None:
        """Fivetran retries for 24 h; forwarding must outlast that."""
        assert Settings().forward_retry_hours >= 24

    def test_credentials_from_variables(self) -> None:
        s = Settings(
            airflow_url="http://x", airflow_username="u", airflow_password=SecretStr("hunter2")
        )
        assert credentials(s) == ("u", "hunter2")
        assert "hunter2" not in repr(s)

    def test_credentials_file(self, tmp_path: Path) -> None:
        """A credentials file holds user:password, or JSON."""
        f = tmp_path / "cred"
        f.write_text("svc:s3cr:et\n")
        assert credentials(Settings(airflow_credentials_file=str(f))) == ("svc", "s3cr:et")
        f.write_text('{"username": "j", "password": "k"}')
        assert credentials(Settings(airflow_credentials_file=str(f))) == ("j", "k")
        f.write_text("nocolon")
        with pytest.raises(ConfigurationError, match="username:password"):
            credentials(Settings(airflow_credentials_file=str(f)))

    def test_missing_credentials(self) -> None:
        with pytest.raises(ConfigurationError, match="AIRFLOW_USERNAME"):
            credentials(Settings(airflow_url="http://x"))


class TestRetryAfter:
    def test_seconds_and_dates(self) -> None:
        assert retry_after_seconds("7") == 7.0
        assert retry_after_seconds(None) is None
        assert retry_after_seconds("garbage") is None
        assert retry_after_seconds(
            "Thu, 01 Jan 2026 00:01:00 GMT", now=1767225600.0
        ) == pytest.approx(60.0)

    @pytest.mark.parametrize(
        ("header", "wait"),
        [
            ("120", 120.0),
            ("0", 0.75),
            ("1e22", 3600.0),
            ("inf", 3600.0),
            ("Infinity", 3600.0),
            ("9" * 400, 3600.0),
            ("Fri, 31 Dec 9999 23:59:59 GMT", 3600.0),
            ("-5", 0.75),
            ("-inf", 0.75),
            ("NaN", 0.75),
            ("soon", 0.75),
            ("", 0.75),
            (None, 0.75),
        ],
    )
    def test_what_a_retry_after_can_ask_is_capped(self, header: str | None, wait: float) -> None:
        """A Retry-After is honoured up to FIVETRAN_EVENTS_MAX_RETRY_AFTER_SECONDS (3600 by
        default); a negative, NaN or unreadable one leaves the normal backoff (0.75 s
        here: the first attempt's 1 s ceiling, jitter at its middle)."""
        assert backoff_seconds(Settings(), 1, retry_after_seconds(header), 0.5) == wait

    def test_the_cap_is_a_setting(self) -> None:
        """The cap follows the setting; out of range, the error names the variable."""
        capped = Settings(max_retry_after_seconds=60)
        assert backoff_seconds(capped, 1, retry_after_seconds("1e22"), 0.5) == 60.0
        for bad in ("-1", "604801", "soon"):
            with pytest.raises(ConfigurationError, match="FIVETRAN_EVENTS_MAX_RETRY_AFTER_SECONDS"):
                load_settings(max_retry_after_seconds=bad)

    def test_not_a_number_is_no_wish(self) -> None:
        """NaN asks for nothing (None); infinity is kept for the caller to clamp."""
        assert retry_after_seconds("NaN") is None
        assert retry_after_seconds("inf") == float("inf")
        assert retry_after_seconds("Fri, 31 Dec 99999 23:59:59 GMT") is None
