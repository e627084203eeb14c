"""The short-circuit before the real FivetranOperator, the connector asset, the plugin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from testkit.fivetran_api import FivetranStandIn, serving
from testkit.support import at

from .dagtest import run, sync


@pytest.fixture
def fivetran(dagtest_airflow: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The provider's FivetranHook pointed at a stand-in of Fivetran's API."""
    from fivetran_provider_async.hooks import FivetranHook

    api = FivetranStandIn(sync_seconds=0.3)
    with serving(api):
        protocol, host = api.base
        monkeypatch.setattr(FivetranHook, "api_protocol", protocol)
        monkeypatch.setattr(FivetranHook, "api_host", host)
        monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_DEFAULT", "fivetran://key:secret@")
        yield api


def short_circuit_dag(dag_id: str) -> Any:
    from airflow.sdk import DAG, CronDataIntervalTimetable
    from fivetran_provider_async.operators import FivetranOperator

    from airflow_plugin.operators.sync import FivetranSyncShortCircuitOperator

    with DAG(
        dag_id,
        schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
        start_date=at(1),
        catchup=False,
    ) as dag:
        FivetranSyncShortCircuitOperator(
            task_id="needs_sync", connector_id="c1"
        ) >> FivetranOperator(
            task_id="fivetran_sync",
            connector_id="c1",
            deferrable=False,
            poll_frequency=1,
            fivetran_retry_delay=0,
        )
    return dag


class TestShortCircuit:
    def test_already_synced_skips_the_fivetran_operator(
        self, fivetran: Any, http: FlaskClient
    ) -> None:
        """A success at or after data_interval_end in the history: no sync is forced."""
        fivetran.connector("c1", succeeded_at=at(5, 6))
        sync(http, "c1", at(5, 6), sync_id="ok-5")
        out = run(short_circuit_dag("sc_skip"), at(5))
        assert out["needs_sync"][0] == "success" and out["fivetran_sync"][0] == "skipped"
        assert fivetran.total_calls == 0

    def test_not_synced_runs_the_real_fivetran_operator(
        self, fivetran: Any, http: FlaskClient
    ) -> None:
        """No success at or after the target: the provider's operator forces one sync."""
        fivetran.connector("c1", succeeded_at=at(4, 6))
        sync(http, "c1", at(4, 6), sync_id="ok-4")
        out = run(short_circuit_dag("sc_run"), at(5))
        assert out["needs_sync"][0] == "success" and out["fivetran_sync"][0] == "success"
        assert fivetran.calls["POST /v1/connectors/{id}/force"] == 1

    def test_a_failure_after_the_target_still_syncs(self, fivetran: Any, http: FlaskClient) -> None:
        """Only a success skips the sync; a failed one after the target does not."""
        fivetran.connector("c1", succeeded_at=at(4, 6), failed_at=at(5, 6))
        sync(http, "c1", at(5, 6), "FAILURE", sync_id="bad-5")
        out = run(short_circuit_dag("sc_fail"), at(5))
        assert out["fivetran_sync"][0] == "success"
        assert fivetran.calls["POST /v1/connectors/{id}/force"] == 1


class TestAssets:
    def test_connector_asset_uses_the_forwarder_uri(self) -> None:
        from airflow_plugin.plugin import connector_asset, connector_assets
        from fivetran_events.uris import dataset_uri

        assert (
            connector_asset("assimilate_seem").uri
            == dataset_uri("assimilate_seem")
            == "fivetran://connector/assimilate_seem"
        )
        assert [
            a.uri for a in connector_assets("a", "b", template="fivetran://w/{connector_id}")
        ] == ["fivetran://w/a", "fivetran://w/b"]

    def test_a_dag_scheduled_on_connector_assets_serializes(self, dagtest_airflow: Path) -> None:
        """Airflow accepts the fivetran:// URI in schedule=[...] (serialized to the DB)."""
        from airflow.sdk import DAG
        from airflow.sdk import timezone as tz

        from airflow_plugin.plugin import connector_asset

        from .dagtest import serialize

        with DAG(
            "on_asset", schedule=[connector_asset("c1")], start_date=tz.datetime(2026, 1, 1)
        ) as dag:
            pass
        serialize(dag)
        condition = dag.timetable.asset_condition
        assert [a.uri for a in condition.objects] == ["fivetran://connector/c1"]  # type: ignore[union-attr]


class TestPlugin:
    def test_registered_through_the_entry_point(self, dagtest_airflow: Path) -> None:
        from importlib.metadata import entry_points

        from airflow_plugin.plugin import FivetranEventsPlugin

        (ep,) = [e for e in entry_points(group="airflow.plugins") if e.name == "fivetran_events"]
        assert ep.load() is FivetranEventsPlugin

    def test_macros_in_a_template(self, dagtest_airflow: Path, http: FlaskClient) -> None:
        """macros.fivetran_events.* render in a task's template."""
        from airflow.providers.standard.operators.python import PythonOperator
        from airflow.sdk import DAG, CronDataIntervalTimetable

        sync(http, "c1", at(3, 6), sync_id="ok-3")
        sync(http, "c1", at(6, 6), sync_id="ok-6")
        with DAG(
            "macros",
            schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
            start_date=at(1),
            catchup=False,
        ) as dag:
            PythonOperator(
                task_id="m",
                python_callable=lambda last, uri: f"{last}|{uri}",
                op_kwargs={
                    "last": "{{ macros.fivetran_events.last_successful_sync('c1', "
                    "data_interval_end)['sync_id'] }}",
                    "uri": "{{ macros.fivetran_events.asset_uri('c1') }}",
                },
            )
        out = run(dag, at(5))
        assert out["m"] == ("success", "ok-3|fivetran://connector/c1")


class TestTheStandInServesAstronomersHook:
    def test_a_lookup_by_names_and_a_resync_on_the_legacy_endpoints(self, fivetran: Any) -> None:
        """What bench/dropin.py runs astronomer's examples on: ``/v1/groups/{id}/connectors``
        and ``POST /v1/connectors/{id}/resync`` (which starts a resync, scope and all)."""
        from fivetran_provider_async.hooks import FivetranHook

        fivetran.group("g_legacy", "Legacy WH")
        fivetran.connector("c_legacy", group_id="g_legacy", schema="legacy_schema")
        fivetran.connector("c_other", group_id="g_elsewhere", schema="legacy_schema")
        hook = FivetranHook(retry_delay=0)
        assert hook.get_connector_id("legacy_schema", "Legacy WH") == "c_legacy"
        hook.start_fivetran_sync("c_legacy", mode="resync", payload={"scope": {"s": ["t"]}})
        assert fivetran.started[-1][0] == "c_legacy" and fivetran.started[-1][3] == "resync"
        assert fivetran.calls["GET /v1/groups/{id}/connectors"] == 1
        assert fivetran.calls["POST /v1/connectors/{id}/resync"] == 1
