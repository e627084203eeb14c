"""One asset event per destination table: the table cache and the table-level delivery.

Real redis-server, the real Flask app and RQ's worker; Fivetran is its stand-in
(testkit/fivetran_api.py: the schema configuration and the destination as Fivetran
documents them), Airflow 2 its stand-in (testkit/airflow2_standin.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryState
from fivetran_events.destinations import destination_tables, refresh, tables_fresh
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.keys import delivery_id, tables_fresh_key
from testkit.airflow2_standin import Airflow2StandIn
from testkit.fivetran_api import TEST_API_KEY, TEST_API_SECRET, FivetranStandIn
from testkit.forward_support import CID, URI, forwarder, post_event, run_worker
from webhook_app.forwarding.enqueue import tables_uri
from webhook_app.forwarding.forwarder import Forwarder
from webhook_app.forwarding.replay import Replayer

pytestmark = pytest.mark.timeout(60)

GROUP = "inappropriate_implode"  # testkit.support.payload's destination_group_id
HOST = "warehouse.example.com"
ACCOUNT = f"postgres://{HOST}:5432/analytics/salesforce/account"
OPPORTUNITY = f"postgres://{HOST}:5432/analytics/salesforce/opportunity"
LEAD = f"postgres://{HOST}:5432/analytics/salesforce/lead"


@pytest.fixture
def fivetran(api: FivetranStandIn) -> FivetranStandIn:
    """The connector with three enabled tables (one renamed in the destination) and one
    disabled, in a Postgres destination."""
    api.connector(CID, group_id=GROUP)
    api.tables(
        CID,
        {"salesforce": ["account", "opportunity", "Lead"]},
        disabled={"salesforce": ["task"]},
        renamed={"salesforce.Lead": "lead"},
    )
    api.destination(GROUP, "postgres_warehouse", host=HOST, port=5432, database="analytics")
    return api


def table_settings(settings: Settings, api: FivetranStandIn, granularity: str) -> Settings:
    s = settings.model_copy(
        update={
            "asset_granularity": granularity,
            "fivetran_api_url": api.url,
            "fivetran_api_key": TEST_API_KEY,
            "fivetran_api_secret": TEST_API_SECRET,
        }
    )
    return Settings(**{k: getattr(s, k) for k in Settings.model_fields})


def client_of(api: FivetranStandIn) -> FivetranClient:
    return FivetranClient(TEST_API_KEY, TEST_API_SECRET, api.url, backoff=0.01)


@pytest.fixture
def tsettings(settings: Settings, fivetran: FivetranStandIn) -> Settings:
    return table_settings(settings, fivetran, "table")


@pytest.fixture
def tapp(tsettings: Settings) -> Flask:
    from webhook_app import create_app

    return create_app(tsettings)


@pytest.fixture
def thttp(tapp: Flask) -> Iterator[Any]:
    with tapp.test_client() as c:
        yield c


@pytest.fixture
def tfw(tsettings: Settings, airflow2_standin: Airflow2StandIn) -> Forwarder:
    """A worker's Forwarder for table granularity; Airflow knows two of the tables (a
    DAG reads each) and the connector's asset."""
    airflow2_standin.add_dataset(ACCOUNT, dags=("daily_accounts",))
    airflow2_standin.add_dataset(OPPORTUNITY, dags=("pipeline", "forecast"))
    airflow2_standin.add_dataset(URI, dags=("whole_connector",))
    s = airflow2_standin
    return forwarder(tsettings, s.url, s.username, s.password)


class TestTheCache:
    def test_refresh_names_the_enabled_tables_as_in_the_destination(
        self, client: redis.Redis, tsettings: Settings, fivetran: FivetranStandIn
    ) -> None:
        """Disabled tables are left out, renamed ones carry their destination name, and
        the reader gives back what was stored; two calls to Fivetran."""
        assert destination_tables(client, tsettings.key_prefix, CID) is None
        refresh(client, tsettings, client_of(fivetran), CID, GROUP)
        got = destination_tables(client, tsettings.key_prefix, CID)
        assert got is not None
        assert [t.uri for t in got] == [ACCOUNT, LEAD, OPPORTUNITY]
        assert got[0].namespace == f"postgres://{HOST}:5432"
        assert got[0].name == "analytics.salesforce.account"
        assert fivetran.calls["GET /v1/connections/{id}/schemas"] == 1
        assert fivetran.calls["GET /v1/destinations/{id}"] == 1
        assert tables_fresh(client, tsettings.key_prefix, CID)

    def test_a_snowflake_destination_is_named_upper_case(
        self, client: redis.Redis, tsettings: Settings, fivetran: FivetranStandIn
    ) -> None:
        """Fivetran's lower-case names become Snowflake's upper-case ones, the account
        OpenLineage's (its cloud added), in both the asset URI and the lineage name."""
        fivetran.destination(
            GROUP, "snowflake", host="xy12345.eu-west-1.snowflakecomputing.com", database="raw"
        )
        refresh(client, tsettings, client_of(fivetran), CID, GROUP)
        got = destination_tables(client, tsettings.key_prefix, CID) or []
        assert (got[0].uri, got[0].name) == (
            "snowflake://xy12345.eu-west-1.aws/RAW/SALESFORCE/ACCOUNT",
            "RAW.SALESFORCE.ACCOUNT",
        )

    def test_the_group_comes_from_the_connection_when_not_given(
        self, client: redis.Redis, tsettings: Settings, fivetran: FivetranStandIn
    ) -> None:
        refresh(client, tsettings, client_of(fivetran), CID)
        assert fivetran.calls["GET /v1/connections/{id}"] == 1
        assert destination_tables(client, tsettings.key_prefix, CID)

    def test_freshness_lasts_the_refresh_period(
        self, client: redis.Redis, tsettings: Settings, fivetran: FivetranStandIn
    ) -> None:
        """A day by default: the mark expires then; the list stays a week longer."""
        refresh(client, tsettings, client_of(fivetran), CID, GROUP)
        fresh_ttl = client.ttl(tables_fresh_key(tsettings.key_prefix, CID))
        assert 86_400 - 5 <= fresh_ttl <= 86_400
        assert client.ttl(f"{tsettings.key_prefix}tables:{CID}") > 7 * 86_400

    @pytest.mark.parametrize("event", ["edit_connector", "resync_table", "edit_connection"])
    def test_an_event_that_may_change_the_tables_makes_them_stale(
        self,
        client: redis.Redis,
        tsettings: Settings,
        fivetran: FivetranStandIn,
        thttp: Any,
        event: str,
    ) -> None:
        """The list stays for use; only its freshness goes, so the next expansion reads
        Fivetran again."""
        refresh(client, tsettings, client_of(fivetran), CID, GROUP)
        post_event(thttp, event=event, tables=["salesforce.account"])
        assert not tables_fresh(client, tsettings.key_prefix, CID)
        assert destination_tables(client, tsettings.key_prefix, CID) is not None

    def test_a_sync_leaves_the_tables_fresh(
        self, client: redis.Redis, tsettings: Settings, fivetran: FivetranStandIn, thttp: Any
    ) -> None:
        refresh(client, tsettings, client_of(fivetran), CID, GROUP)
        post_event(thttp, event="sync_start")
        post_event(thttp, sync_id="s1")
        assert tables_fresh(client, tsettings.key_prefix, CID)


class TestForwardingPerTable:
    def test_one_event_per_consumed_table_exactly_once(
        self,
        thttp: Any,
        tfw: Forwarder,
        fivetran: FivetranStandIn,
        airflow2_standin: Airflow2StandIn,
        client: redis.Redis,
        tsettings: Settings,
    ) -> None:
        """The webhook writes one delivery for all tables; the worker reads the tables
        from Fivetran, asks Airflow once which are assets, and posts those two (the
        disabled and the unconsumed table get nothing, the connector asset nothing in
        ``table`` mode). A redelivery and a second run post nothing more."""
        post_event(thttp, sync_id="s1")
        assert client.smembers(f"{tsettings.key_prefix}fwd:s:{CID}:s1") == {
            delivery_id(CID, "s1", tables_uri(CID)).encode()
        }
        run_worker(tfw)
        posted = sorted(p["dataset_uri"] for p in airflow2_standin.posts)
        assert posted == [ACCOUNT, OPPORTUNITY]
        assert airflow2_standin.listings == 1
        assert fivetran.calls["GET /v1/connections/{id}/schemas"] == 1
        marker = tfw.store.get(delivery_id(CID, "s1", tables_uri(CID)))
        assert marker is not None
        assert marker.state is DeliveryState.DELIVERED
        assert marker.fields["tables"] == "2/3"
        extra = {p["dataset_uri"]: p["extra"] for p in airflow2_standin.posts}
        assert extra[ACCOUNT]["table"] == "account"
        assert extra[ACCOUNT]["schema"] == "salesforce"
        assert extra[ACCOUNT]["sync_id"] == "s1"
        assert extra[ACCOUNT]["dataset_name"] == "analytics.salesforce.account"

        post_event(thttp, sync_id="s1")  # Fivetran redelivers
        run_worker(tfw)
        for did in (delivery_id(CID, "s1", u) for u in (ACCOUNT, OPPORTUNITY)):
            Replayer.of(tfw).replay([did])  # even a replay of a delivered one posts nothing
        run_worker(tfw)
        assert len(airflow2_standin.posts) == 2
        # the cache was fresh: Fivetran was not asked again
        assert fivetran.calls["GET /v1/connections/{id}/schemas"] == 1

    def test_resync_table_marks_full_refresh_on_that_table_only(
        self,
        thttp: Any,
        tfw: Forwarder,
        airflow2_standin: Airflow2StandIn,
        fivetran: FivetranStandIn,
    ) -> None:
        """And it makes the list stale: the sync after it reads Fivetran again."""
        post_event(thttp, sync_id="s0")
        run_worker(tfw)
        post_event(thttp, event="resync_table", tables=["salesforce.opportunity"])
        post_event(thttp, sync_id="s1")
        run_worker(tfw)
        s1 = {
            p["dataset_uri"]: p["extra"]
            for p in airflow2_standin.posts
            if p["extra"]["sync_id"] == "s1"
        }
        assert s1[OPPORTUNITY]["full_refresh"] is True
        assert s1[ACCOUNT]["full_refresh"] is False
        assert all("full_refresh_tables" not in e for e in s1.values())
        assert fivetran.calls["GET /v1/connections/{id}/schemas"] == 2

    def test_both_keeps_the_connector_asset(
        self,
        settings: Settings,
        fivetran: FivetranStandIn,
        airflow2_standin: Airflow2StandIn,
    ) -> None:
        from webhook_app import create_app

        s = table_settings(settings, fivetran, "both")
        for uri in (ACCOUNT, URI):
            airflow2_standin.add_dataset(uri)
        fw = forwarder(s, airflow2_standin.url, "admin", "admin-pass")
        with create_app(s).test_client() as http:
            post_event(http, sync_id="s1")
        run_worker(fw)
        assert sorted(p["dataset_uri"] for p in airflow2_standin.posts) == [URI, ACCOUNT]

    def test_connector_granularity_is_unchanged(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn, fivetran: FivetranStandIn
    ) -> None:
        """The default: one event to the connector's asset, Fivetran never asked."""
        post_event(http, sync_id="s1")
        run_worker(fw)
        assert [p["dataset_uri"] for p in standin.posts] == [URI]
        assert fivetran.total_calls == 0

    def test_fivetran_down_with_nothing_cached_retries(
        self,
        thttp: Any,
        tfw: Forwarder,
        fivetran: FivetranStandIn,
        airflow2_standin: Airflow2StandIn,
    ) -> None:
        """A 503 from Fivetran is a retry of the table-level delivery, not a loss."""
        fivetran.fail_next(20, status=503, retry_after=None)
        post_event(thttp, sync_id="s1")
        run_worker(tfw)
        marker = tfw.store.get(delivery_id(CID, "s1", tables_uri(CID)))
        assert marker is not None and marker.state is DeliveryState.RETRYING
        assert airflow2_standin.posts == []

    def test_managed_bigquery_without_a_project_fails_clearly(
        self,
        thttp: Any,
        tfw: Forwarder,
        fivetran: FivetranStandIn,
        airflow2_standin: Airflow2StandIn,
    ) -> None:
        """No bigquery:///... URI: the table-level delivery fails, naming the field."""
        fivetran.destination(GROUP, "managed_big_query", data_set_location="US")
        post_event(thttp, sync_id="s1")
        run_worker(tfw)
        marker = tfw.store.get(delivery_id(CID, "s1", tables_uri(CID)))
        assert marker is not None and marker.state is DeliveryState.FAILED
        assert "project_id" in (marker.get("reason") or ""), marker.fields
        assert airflow2_standin.posts == []

    def test_a_stale_list_is_used_while_fivetran_is_down(
        self,
        thttp: Any,
        tfw: Forwarder,
        fivetran: FivetranStandIn,
        airflow2_standin: Airflow2StandIn,
        client: redis.Redis,
        tsettings: Settings,
    ) -> None:
        refresh(client, tsettings, client_of(fivetran), CID, GROUP)
        client.delete(tables_fresh_key(tsettings.key_prefix, CID))
        fivetran.fail_next(20, status=503, retry_after=None)
        post_event(thttp, sync_id="s1")
        run_worker(tfw)
        assert sorted(p["dataset_uri"] for p in airflow2_standin.posts) == [ACCOUNT, OPPORTUNITY]


class TestDatasetsCheck:
    def test_lists_the_table_uris_and_the_dags_reading_them(
        self,
        thttp: Any,
        tfw: Forwarder,
        tsettings: Settings,
        fivetran: FivetranStandIn,
    ) -> None:
        """The table list comes from Fivetran (none cached yet); a table no DAG reads is
        listed without failing the check (only a connector's own URI can be MISSING)."""
        import json

        from click.testing import CliRunner

        from testkit.worker_process import worker_env
        from webhook_app.cli import main

        post_event(thttp, event="sync_start")
        env = worker_env(
            tfw.settings,
            asset_granularity="table",
            fivetran_api_url=fivetran.url,
            fivetran_api_key=TEST_API_KEY,
            fivetran_api_secret=TEST_API_SECRET,
        )
        out = CliRunner().invoke(main, ["datasets", "check", "--json"], env=env)
        assert out.exit_code == 0, out.output
        rows = {r["table"]: r for r in json.loads(out.stdout)["datasets"]}
        assert set(rows) == {"salesforce.account", "salesforce.lead", "salesforce.opportunity"}
        assert rows["salesforce.opportunity"]["dags"] == ["forecast", "pipeline"]
        assert rows["salesforce.lead"]["known_to_airflow"] is False
        assert rows["salesforce.lead"]["uri"] == LEAD
        text = CliRunner().invoke(main, ["datasets", "check"], env=env)
        assert text.exit_code == 0
        assert "daily_accounts" in text.output and ACCOUNT in text.output
        # "both" adds the connector's own row, which exits 1 when Airflow lacks it
        env["FIVETRAN_EVENTS_ASSET_GRANULARITY"] = "both"
        out = CliRunner().invoke(main, ["datasets", "check", "--json"], env=env)
        assert out.exit_code == 0
        assert URI in [r["uri"] for r in json.loads(out.stdout)["datasets"]]


class TestRefreshWhenDue:
    def test_an_expired_list_is_read_again_before_the_next_expansion(
        self,
        thttp: Any,
        tfw: Forwarder,
        fivetran: FivetranStandIn,
        airflow2_standin: Airflow2StandIn,
        client: redis.Redis,
        tsettings: Settings,
    ) -> None:
        """Once a day (the freshness mark's expiry, here deleted as it would expire), the
        next sync reads the schema configuration again and forwards the new table."""
        post_event(thttp, sync_id="s1")
        run_worker(tfw)
        fivetran.tables(CID, {"salesforce": ["account", "opportunity", "lead", "contact"]})
        contact = f"postgres://{HOST}:5432/analytics/salesforce/contact"
        airflow2_standin.add_dataset(contact)
        post_event(thttp, sync_id="s2")
        run_worker(tfw)
        assert contact not in [p["dataset_uri"] for p in airflow2_standin.posts]  # still fresh
        client.delete(tables_fresh_key(tsettings.key_prefix, CID))
        post_event(thttp, sync_id="s3")
        run_worker(tfw)
        s3 = [p["dataset_uri"] for p in airflow2_standin.posts if p["extra"]["sync_id"] == "s3"]
        assert contact in s3
        assert fivetran.calls["GET /v1/connections/{id}/schemas"] == 2

    def test_edit_connector_makes_the_next_sync_read_fivetran(
        self, thttp: Any, tfw: Forwarder, fivetran: FivetranStandIn
    ) -> None:
        post_event(thttp, sync_id="s1")
        run_worker(tfw)
        post_event(thttp, event="edit_connector")
        post_event(thttp, sync_id="s2")
        run_worker(tfw)
        assert fivetran.calls["GET /v1/connections/{id}/schemas"] == 2
        assert fivetran.calls["GET /v1/destinations/{id}"] == 2


class TestReplaySince:
    def test_forward_since_creates_the_table_level_delivery(
        self,
        tfw: Forwarder,
        fivetran: FivetranStandIn,
        airflow2_standin: Airflow2StandIn,
        client: redis.Redis,
        tsettings: Settings,
    ) -> None:
        """A success recorded without forwarding (an import) is forwarded per table by
        ``replay --since``, as the webhook would have."""
        from fivetran_events import HistoryWriter
        from testkit.support import at, ev

        writer = HistoryWriter(client, tsettings.key_prefix, tsettings.retention_ms)
        writer.record(ev(sync_id="old", created=at(3)))
        created, _, _ = Replayer.of(tfw).forward_since(0)
        assert created == [delivery_id(CID, "old", tables_uri(CID))]
        run_worker(tfw)
        assert sorted(p["dataset_uri"] for p in airflow2_standin.posts) == [ACCOUNT, OPPORTUNITY]


class TestWhatStays:
    def test_a_delivered_tables_record_stays_an_hour_the_syncs_the_keep_time(
        self,
        thttp: Any,
        tfw: Forwarder,
        client: redis.Redis,
        tsettings: Settings,
    ) -> None:
        """Per sync only the table-level delivery outlives the hour, so what a sync leaves
        for the keep time does not grow with the tables."""
        post_event(thttp, sync_id="s1")
        run_worker(tfw)
        table_ttl = client.pttl(tfw.store.key(delivery_id(CID, "s1", ACCOUNT)))
        sync_ttl = client.pttl(tfw.store.key(delivery_id(CID, "s1", tables_uri(CID))))
        assert 3_500_000 < table_ttl <= 3_600_000
        assert sync_ttl > 71 * 3_600_000
        assert client.pttl(f"{tsettings.key_prefix}fwd:s:{CID}:s1") > 71 * 3_600_000
