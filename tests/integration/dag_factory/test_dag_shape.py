"""The DAG factory reading Redis: connectors from the recorded history, table lists from
the worker's cache, and a clear import error when Redis is unreachable (the DAG's shape
built from files alone: tests/unit/dag_factory/test_dag_shape.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask.testing import FlaskClient

from fivetran_events.exceptions import SqlFolderError
from testkit.sql_folders import SALES, folder, sales_tables


class TestConnectorsFromHistory:
    def test_recorded_connector_names_are_schemas(
        self,
        tmp_path: Path,
        http: FlaskClient,
        redis_url: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A connector the webhook recorded as 'ftar_pg' owns the schema ftar_pg."""
        from airflow_plugin.dag_factory import build_dag
        from testkit.support import payload, signed

        raw, headers = signed(payload(connector_id="pg_conn"))  # connector_name ftar_pg
        assert http.post("/webhooks/fivetran", data=raw, headers=headers).status_code == 200
        monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS", f"{redis_url}?key_prefix=test%3A")
        files = {
            "a.sql": "CREATE TABLE t AS SELECT * FROM ftar_pg.orders",
            "dag.toml": "connectors_from_history = true\n",
        }
        dag = build_dag(folder(tmp_path, files))
        assert {a.uri for a in dag.timetable.asset_condition.objects} == {
            "fivetran://connector/pg_conn"
        }

    def test_unreachable_history_is_an_import_error(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from airflow_plugin.dag_factory import build_dag

        monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS", "redis://127.0.0.1:1/0")
        files = {
            "a.sql": "SELECT * FROM ftar_pg.orders",
            "dag.toml": "connectors_from_history = true\n",
        }
        with pytest.raises(SqlFolderError, match="connectors_from_history"):
            build_dag(folder(tmp_path, files))


class TestTableAssets:
    """The table lists the worker cached in Redis, read by the DAG factory."""

    def test_read_from_the_cache_through_the_redis_connection(
        self,
        tmp_path: Path,
        redis_url: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The list the worker cached (destinations.store_tables) is the one read."""
        import redis

        from airflow_plugin.dag_factory import build_dag
        from fivetran_events.destinations import store_tables

        client = redis.Redis.from_url(redis_url)
        store_tables(
            client,
            "test:",
            "sf_conn",
            sales_tables()["sf_conn"],
            fetched_ms=0,
            fresh_s=60,
            keep_s=60,
        )
        monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS", f"{redis_url}?key_prefix=test%3A")
        dag = build_dag(folder(tmp_path, SALES), table_assets=True)
        uris = {a.uri for a in dag.timetable.asset_condition.objects}
        assert "postgres://wh:5432/analytics/salesforce/account" in uris
        assert "fivetran://connector/sf_conn" not in uris

    def test_an_unreachable_cache_is_a_sentence(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from airflow_plugin.dag_factory import build_dag

        monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS", "redis://127.0.0.1:1/0")
        with pytest.raises(SqlFolderError, match="table_assets"):
            build_dag(folder(tmp_path, SALES), table_assets=True)
