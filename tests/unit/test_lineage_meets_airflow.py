"""A synced table is one dataset: our run's output is what Airflow's SQL lineage reads.

Airflow's OpenLineage provider names the tables an SQL task reads with its SQL parser
(``SQLParser.generate_openlineage_metadata_from_sql``, what ``SQLExecuteQueryOperator``
calls) and the hook's ``DatabaseInfo``; PostgresHook's is scheme ``postgres``, authority
``host:port`` and the connection's database. Our COMPLETE names the destination's tables
by OpenLineage's naming spec (``openlineage.client.naming``); the two must meet.
"""

from __future__ import annotations

import json
from typing import Any, cast

from airflow.providers.openlineage.sqlparser import DatabaseInfo, SQLParser
from openlineage.client.naming.dataset import Postgres
from openlineage.client.serde import Serde

from fivetran_events import Settings
from fivetran_events.deliveries import Delivery
from webhook_app.forwarding.lineage import build_event

HOST, PORT, DATABASE = "warehouse.internal", "5432", "analytics"


def synced_tables(connector_id: str) -> list[tuple[str, str]]:
    """The destination's tables of a Postgres destination, named by OpenLineage's spec
    (after the merge: ``destinations.destination_tables``)."""
    tables = [("salesforce", "account"), ("salesforce", "opportunity")]
    return [
        (n.get_namespace(), n.get_name())
        for n in (Postgres(HOST, PORT, DATABASE, schema, table) for schema, table in tables)
    ]


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
