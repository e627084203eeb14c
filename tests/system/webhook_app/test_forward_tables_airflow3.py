"""One asset per table against a real Airflow 3 (testkit/airflow_harness.py).

The session's Airflow has a DAG scheduled on ``shop.orders``' asset
(testkit/airflow_dags/fivetran_table_consumer.py) and none on ``shop.items``; Fivetran
is its stand-in. Every wait is bounded.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryState
from fivetran_events.destinations import name_table
from fivetran_events.keys import delivery_id
from testkit.airflow_dags.fivetran_table_consumer import ORDERS_URI, WAREHOUSE
from testkit.airflow_harness import AirflowServer
from testkit.fivetran_api import TEST_API_KEY, TEST_API_SECRET, FivetranStandIn, serving
from testkit.forward_support import forwarder, post_event, run_worker
from testkit.worker_process import worker_env
from webhook_app import create_app
from webhook_app.airflow_client import AirflowClient
from webhook_app.cli import main
from webhook_app.forwarding.enqueue import tables_uri

pytestmark = pytest.mark.timeout(480)

CID, GROUP = "tbl_conn", "inappropriate_implode"
ITEMS_URI = name_table("postgres_warehouse", WAREHOUSE, "shop", "items").uri


@pytest.fixture
def fivetran() -> Iterator[FivetranStandIn]:
    api = FivetranStandIn(api_key=TEST_API_KEY, api_secret=TEST_API_SECRET)
    with serving(api):
        api.connector(CID, group_id=GROUP)
        api.tables(CID, {"shop": ["orders", "items"]})
        api.destination(GROUP, "postgres_warehouse", **WAREHOUSE)
        yield api


@pytest.fixture
def table_settings(af_settings: Settings, fivetran: FivetranStandIn) -> Settings:
    return Settings(
        **{
            **{k: getattr(af_settings, k) for k in Settings.model_fields},
            "asset_granularity": "table",
            "fivetran_api_url": fivetran.url,
            "fivetran_api_key": TEST_API_KEY,
            "fivetran_api_secret": TEST_API_SECRET,
        }
    )


def test_the_naming_meets_the_dag_that_reads_the_table() -> None:
    """The test DAG's URI is the one the worker computes for that table."""
    assert name_table("postgres_warehouse", WAREHOUSE, "shop", "orders").uri == ORDERS_URI


def test_assets_under_reads_airflow_3s_scheduled_dags(airflow3: AirflowServer) -> None:
    airflow3.wait_for_asset(ORDERS_URI)
    c = AirflowClient(airflow3.url, airflow3.username, airflow3.password)
    found = c.assets_under("postgres://wh.test:5432/analytics/shop/")
    assert found == {ORDERS_URI: ["consume_table_orders"]}


def test_a_sync_reaches_the_dag_of_its_table(
    airflow3: AirflowServer, table_settings: Settings, fivetran: FivetranStandIn
) -> None:
    """Webhook -> one table-level delivery -> the worker posts to shop.orders only (no
    asset of shop.items) -> the DAG scheduled on it runs with the table in extra;
    ``datasets check`` names that DAG."""
    airflow3.wait_for_asset(ORDERS_URI)
    fw = forwarder(table_settings, airflow3.url, airflow3.username, airflow3.password)
    sid = f"tbl-{uuid.uuid4()}"
    with create_app(table_settings).test_client() as http:
        post_event(http, event="sync_start", connector_id=CID, sync_id=sid)
        post_event(http, connector_id=CID, sync_id=sid)
    run_worker(fw)
    marker = fw.store.get(delivery_id(CID, sid, tables_uri(CID)))
    assert marker is not None and marker.fields["tables"] == "1/2"
    orders = fw.store.get(delivery_id(CID, sid, ORDERS_URI))
    assert orders is not None and orders.state is DeliveryState.DELIVERED
    assert fw.store.get(delivery_id(CID, sid, ITEMS_URI)) is None
    events = [
        e for e in airflow3.asset_events(ORDERS_URI) if (e.get("extra") or {}).get("sync_id") == sid
    ]
    assert len(events) == 1
    assert events[0]["extra"]["table"] == "orders"
    assert events[0]["extra"]["dataset_name"] == "analytics.shop.orders"

    def dag_saw_it() -> bool:
        out = airflow3.output_dir / "table_orders"
        return any(
            e["extra"].get("sync_id") == sid
            for f in (out.glob("*.json") if out.exists() else [])
            for e in json.loads(f.read_text())["events"]
        )

    airflow3.wait_for(f"consume_table_orders to see {sid}", dag_saw_it, timeout=120)

    env = worker_env(
        table_settings,
        asset_granularity="table",
        fivetran_api_url=fivetran.url,
        fivetran_api_key=TEST_API_KEY,
        fivetran_api_secret=TEST_API_SECRET,
    )
    out: Any = CliRunner().invoke(main, ["datasets", "check", "--json"], env=env)
    assert out.exit_code == 0, out.output
    rows = {r["table"]: r for r in json.loads(out.stdout)["datasets"] if "table" in r}
    assert rows["shop.orders"]["dags"] == ["consume_table_orders"]
    assert rows["shop.items"]["known_to_airflow"] is False
