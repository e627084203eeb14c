"""The provider's parts in this process: its info, the connection's form and extras, the
link's URL, and a connector named by its Fivetran name (dag.test() for the sensors)."""

from __future__ import annotations

import json
from datetime import datetime
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from testkit.support import at, payload
from testkit.support import deliver as post

from .dagtest import run

FAST: dict[str, Any] = {"poke_interval": 0.2, "timeout": 2, "soft_fail": True}


def import_string(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(import_module(module), name)


def record_connector(http: Any, cid: str, name: str, group: str, ended: datetime) -> None:
    """Record one successful sync of a connector called ``name`` in ``group``."""
    body = payload("sync_end", cid, ended, sync_id=f"{cid}-ok")
    body.update(connector_name=name, destination_group_id=group)
    post(http, body)


class TestProviderInfo:
    def test_validates_against_airflows_schema_and_imports(self, dagtest_airflow: Path) -> None:
        """Airflow's own validator accepts the info, and every class it names imports."""
        from airflow.providers_manager import _create_provider_info_schema_validator

        from airflow_plugin.provider import get_provider_info

        info = get_provider_info()
        _create_provider_info_schema_validator().validate(info)
        assert info["package-name"] == "fivetran-events"
        types = {c["connection-type"]: c for c in info["connection-types"]}
        assert set(types) == {"fivetran_events", "fivetran"}
        for conn_type, conn in types.items():
            hook = import_string(conn["hook-class-name"])
            assert (hook.conn_type, hook.hook_name) == (conn_type, conn["hook-name"])
        conn = types["fivetran_events"]
        for name in [*info["extra-links"], *(p["plugin-class"] for p in info["plugins"])]:
            import_string(name)
        assert set(conn["conn-fields"]) == {
            "ssl",
            "ssl_ca_certs",
            "key_prefix",
            "max_sync_duration_hours",
            *("sentinels", "sentinel_service", "sentinel_password", "sentinel_ssl"),
        }

    def test_registered_through_the_provider_entry_point(self, dagtest_airflow: Path) -> None:
        """The installed distribution names get_provider_info under apache_airflow_provider."""
        from importlib.metadata import entry_points

        (ep,) = [
            e
            for e in entry_points(group="apache_airflow_provider")
            if e.dist is not None and e.dist.name == "fivetran-events"
        ]
        assert ep.value == "airflow_plugin.provider:get_provider_info"


class TestConnectionExtras:
    def connection(self, **fields: Any):  # type: ignore[no-untyped-def]
        from airflow_plugin.compat import Connection

        return Connection(conn_id="x", **fields)

    def test_form_extras_with_airflows_prefix(self, dagtest_airflow: Path) -> None:
        """A form's extras stored as extra__fivetran_events__<name> are read as <name>."""
        from airflow_plugin.hooks import config_from_connection

        extra = {
            "extra__fivetran_events__key_prefix": "prod:",
            "extra__fivetran_events__max_sync_duration_hours": 2,
            "extra__fivetran_events__ssl": True,
            "extra__fivetran_events__ssl_ca_certs": "/etc/redis/ca.pem",
        }
        cfg = config_from_connection(
            self.connection(
                conn_type="fivetran_events",
                host="h",
                port=6380,
                schema="3",
                extra=json.dumps(extra),
            )
        )
        assert cfg.url == "rediss://h:6380/3"
        assert cfg.key_prefix == "prod:"
        assert cfg.max_sync_duration_ms == 2 * 3600 * 1000
        assert cfg.to_redis_kwargs()["ssl_ca_certs"] == "/etc/redis/ca.pem"

    def test_ca_file_reaches_redis_and_fails_clearly_when_missing(
        self, dagtest_airflow: Path, tmp_path: Path
    ) -> None:
        """The private CA file is what redis-py loads: a missing one is a clear error."""
        import redis

        from airflow_plugin.hooks import config_from_connection

        missing = tmp_path / "nope.pem"
        cfg = config_from_connection(
            self.connection(
                conn_type="fivetran_events",
                host="127.0.0.1",
                port=1,
                extra=json.dumps({"ssl": True, "ssl_ca_certs": str(missing)}),
            )
        )
        client = redis.Redis.from_url(cfg.url, **cfg.to_redis_kwargs())
        with pytest.raises(redis.ConnectionError):
            client.ping()
        assert client.connection_pool.connection_kwargs["ssl_ca_certs"] == str(missing)

    @pytest.mark.parametrize("hours", ["abc", 0, -3])
    def test_bad_max_sync_duration(self, dagtest_airflow: Path, hours: Any) -> None:
        """A max sync duration that is not a positive number says which field is wrong."""
        from airflow_plugin.hooks import config_from_connection

        conn = self.connection(
            conn_type="fivetran_events", extra=json.dumps({"max_sync_duration_hours": hours})
        )
        with pytest.raises(ValueError, match="max_sync_duration_hours must be a number"):
            config_from_connection(conn)


class TestConnectorViewUrl:
    def test_connector_target_and_flags(self) -> None:
        """The page of one connector at a target, with the decision's flags as the UI reads them."""
        from airflow_plugin.ui import connector_view_url

        url = connector_view_url(
            "sales db",
            at(10),
            criterion="started_after",
            propagate_failures_forward=False,
            always_wait_when_syncing=True,
            wait_when_paused=True,
        )
        assert url == (
            "/fivetran-events/connectors/sales%20db?target=2026-01-10T00%3A00%3A00.000Z"
            "&criterion=started_after&propagate_failures_forward=false"
            "&always_wait_when_syncing=true&wait_when_paused=true"
        )
        assert connector_view_url("c1") == "/fivetran-events/connectors/c1"

    def test_a_misspelt_flag_is_refused(self) -> None:
        from airflow_plugin.ui import connector_view_url

        with pytest.raises(TypeError, match="propagate_failure_forward"):
            connector_view_url("c1", propagate_failure_forward=True)


class TestConnectorNames:
    def test_resolution(self, dagtest_airflow: Path, http: FlaskClient) -> None:
        """A unique name resolves; a repeated one needs the group; unknown ones name the rest."""
        from airflow_plugin.exceptions import ConnectorNameError
        from airflow_plugin.hooks import FivetranEventsRedisHook

        record_connector(http, "pg_eu", "orders", "group_eu", at(3))
        record_connector(http, "pg_us", "orders", "group_us", at(3))
        record_connector(http, "sf_1", "salesforce", "group_eu", at(3))
        hook = FivetranEventsRedisHook()
        assert hook.connector_id_for("salesforce") == "sf_1"
        assert hook.connector_id_for("orders", "group_us") == "pg_us"
        with pytest.raises(ConnectorNameError) as ambiguous:
            hook.connector_id_for("orders")
        assert "ambiguous" in str(ambiguous.value)
        assert "pg_eu (group group_eu)" in str(ambiguous.value)
        assert "pg_us (group group_us)" in str(ambiguous.value)
        with pytest.raises(ConnectorNameError, match=r"no connector named 'orders' in .*group_x"):
            hook.connector_id_for("orders", "group_x")
        with pytest.raises(ConnectorNameError, match=r"known names: orders, salesforce"):
            hook.connector_id_for("hubspot")

    def test_sensor_by_name(self, dagtest_airflow: Path, http: FlaskClient) -> None:
        """A sensor given connector_name decides for that connector and returns its id."""
        from airflow.sdk import DAG

        from airflow_plugin.sensors import FivetranDateTimeSensor

        record_connector(http, "pg_eu", "orders", "group_eu", at(10))
        record_connector(http, "pg_us", "orders", "group_us", at(2))
        with DAG("by_name", schedule=None, start_date=at(1), catchup=False) as dag:
            FivetranDateTimeSensor(
                task_id="eu",
                connector_name="orders",
                destination_name="group_eu",
                target_time="2026-01-05T00:00:00Z",
                **FAST,
            )
            FivetranDateTimeSensor(
                task_id="us",
                connector_name="orders",
                destination_name="group_us",
                target_time="2026-01-05T00:00:00Z",
                **FAST,
            )
            FivetranDateTimeSensor(task_id="unknown", connector_name="nope", **FAST)
        out = run(dag, at(5))
        assert out["eu"][0] == "success" and out["eu"][1]["connector_id"] == "pg_eu"
        # pg_us last synced Jan 2: nothing counts for Jan 5, the poke times out (soft_fail).
        assert out["us"][0] == "skipped"
        assert out["unknown"][0] == "failed"

    def test_needs_exactly_one_of_id_and_name(self, dagtest_airflow: Path) -> None:
        from airflow_plugin.sensors import FivetranDateTimeSensor

        with pytest.raises(ValueError, match="connector_id or connector_name"):
            FivetranDateTimeSensor(task_id="t")
        with pytest.raises(ValueError, match="connector_id or connector_name"):
            FivetranDateTimeSensor(task_id="t", connector_id="a", connector_name="b")


class TestConnectionsForASensor:
    def test_fivetran_events_redis_and_uri_connections(
        self,
        dagtest_airflow: Path,
        http: FlaskClient,
        redis_url: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A fivetran_events connection (form extras), a redis one and a URI all serve a sensor.

        The first is stored in Airflow's database as the UI stores a form; the other two
        are AIRFLOW_CONN_* variables (JSON of type redis, and a fivetran-events:// URI).
        """
        from urllib.parse import urlsplit

        from airflow.models import Connection
        from airflow.sdk import DAG
        from airflow.utils.session import create_session

        from airflow_plugin.sensors import FivetranDateTimeSensor

        where = urlsplit(redis_url)
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id == "fte_form").delete()
            session.add(
                Connection(
                    conn_id="fte_form",
                    conn_type="fivetran_events",
                    host=where.hostname,
                    port=where.port,
                    schema="0",
                    extra=json.dumps(
                        {
                            "extra__fivetran_events__key_prefix": "test:",
                            "extra__fivetran_events__ssl": False,
                            "extra__fivetran_events__ssl_ca_certs": "",
                        }
                    ),
                )
            )
        monkeypatch.setenv(
            "AIRFLOW_CONN_FTE_REDIS_TYPE",
            json.dumps(
                {
                    "conn_type": "redis",
                    "host": where.hostname,
                    "port": where.port,
                    "extra": {"key_prefix": "test:"},
                }
            ),
        )
        monkeypatch.setenv(
            "AIRFLOW_CONN_FTE_URI",
            f"fivetran-events://{where.hostname}:{where.port}/0?key_prefix=test%3A",
        )
        record_connector(http, "conn_c", "conn_c", "g", at(10))
        with DAG("conn_kinds", schedule=None, start_date=at(1), catchup=False) as dag:
            for conn_id in ("fte_form", "fte_redis_type", "fte_uri"):
                FivetranDateTimeSensor(
                    task_id=conn_id,
                    connector_id="conn_c",
                    redis_conn_id=conn_id,
                    target_time="2026-01-05T00:00:00Z",
                    **FAST,
                )
        out = run(dag, at(5))
        for conn_id in ("fte_form", "fte_redis_type", "fte_uri"):
            assert out[conn_id][0] == "success", (conn_id, out[conn_id])
            assert out[conn_id][1]["sync_id"] == "conn_c-ok"
