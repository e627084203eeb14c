"""A synced table is one dataset: our run's output is what Airflow's SQL lineage reads.

Airflow's OpenLineage provider names the tables an SQL task reads with its SQL parser
(``SQLParser.generate_openlineage_metadata_from_sql``, what ``SQLExecuteQueryOperator``
calls) and the hook's ``DatabaseInfo``; PostgresHook's is scheme ``postgres``, authority
``host:port`` and the connection's database. Our COMPLETE names the destination's tables
with ``fivetran_events.destinations.name_table`` from the destination's configuration
as Fivetran's API gives it, the names the worker's cache holds; the two must meet.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from airflow.providers.openlineage.sqlparser import DatabaseInfo, SQLParser
from openlineage.client.serde import Serde

from fivetran_events import Settings
from fivetran_events.deliveries import Delivery
from fivetran_events.destinations import name_table
from webhook_app.forwarding.lineage import build_event

HOST, PORT, DATABASE = "warehouse.internal", "5432", "analytics"


def synced_tables(connector_id: str) -> list[tuple[str, str]]:
    """A Postgres destination's tables, named as the worker names what it caches."""
    config = {"host": HOST, "port": int(PORT), "database": DATABASE}
    tables = [("salesforce", "account"), ("salesforce", "opportunity")]
    named = [name_table("postgres_warehouse", config, s, t, group_id="g") for s, t in tables]
    return [(n.namespace, n.name) for n in named]


def our_outputs() -> set[tuple[str, str]]:
    d = Delivery(
        "sf:s1:x",
        {
            "connector_id": "sf",
            "sync_id": "s1",
            "uri": "openlineage:COMPLETE",
            "status": "SUCCESSFUL",
            "ended_ms": "1779408368638",
        },
    )
    event = json.loads(Serde.to_json(build_event(d, Settings().lineage_namespace, synced_tables)))
    return {(o["namespace"], o["name"]) for o in event["outputs"]}


def airflow_inputs(sql: str) -> set[tuple[str, str]]:
    """The datasets an Airflow SQL task on a Postgres connection reads, by its provider."""
    info = DatabaseInfo(scheme="postgres", authority=f"{HOST}:{PORT}", database=DATABASE)
    lineage = SQLParser(
        dialect="postgres", default_schema="public"
    ).generate_openlineage_metadata_from_sql(
        sql=sql, hook=cast(Any, None), database_info=info, use_connection=False
    )
    return {(ds.namespace, ds.name) for ds in lineage.inputs}


class TestSameDataset:
    def test_sql_task_reading_a_synced_table_names_our_output(self) -> None:
        """A model reading salesforce.account reads the dataset our sync wrote."""
        read = airflow_inputs(
            "INSERT INTO marts.accounts SELECT a.id FROM salesforce.account a "
            "JOIN salesforce.opportunity o ON o.account_id = a.id"
        )
        assert read == our_outputs()

    def test_a_table_we_did_not_sync_does_not_meet(self) -> None:
        """The comparison can fail: another schema's table is another dataset."""
        read = airflow_inputs("SELECT * FROM hubspot.account")
        assert not read & our_outputs()


class TestSnowflake:
    """SnowflakeHook's ``DatabaseInfo`` (apache-airflow-providers-snowflake 6.20.0,
    hooks/snowflake.py ``get_openlineage_database_info``): scheme ``snowflake``, authority
    the connection's account through ``fix_snowflake_sqlalchemy_uri``, upper-case names.
    The provider is not installed (its Snowflake connector, Snowpark, pandas and pyarrow
    are heavy), so that info is built here with OpenLineage's own account fix."""

    @pytest.mark.parametrize("account", ["xy12345.eu-west-1", "xy12345", "myorg-analytics"])
    def test_a_snowflake_task_reads_the_table_fivetran_wrote(self, account: str) -> None:
        from urllib.parse import urlsplit

        from openlineage.common.provider.snowflake import (  # type: ignore[import-untyped]
            fix_snowflake_sqlalchemy_uri,
        )

        # Fivetran's destination: its host and database, names lower case.
        config = {"host": f"{account}.snowflakecomputing.com", "database": "raw"}
        ours = name_table("snowflake", config, "stripe", "charge")
        uri = fix_snowflake_sqlalchemy_uri(f"snowflake://user:pw@{account}/raw/public")
        info = DatabaseInfo(
            scheme="snowflake",
            authority=urlsplit(uri).hostname,
            database="raw",
            is_information_schema_cross_db=True,
            is_uppercase_names=True,
        )
        lineage = SQLParser(
            dialect="snowflake", default_schema="PUBLIC"
        ).generate_openlineage_metadata_from_sql(
            sql="SELECT * FROM stripe.charge",
            hook=cast(Any, None),
            database_info=info,
            use_connection=False,
        )
        assert {(ds.namespace, ds.name) for ds in lineage.inputs} == {(ours.namespace, ours.name)}
