"""A connection's destination tables: their names in Airflow and OpenLineage, and their cache.

``name_table`` names a table as an Airflow SQL task's lineage does, so both meet on one
URI: the asset URI as the providers' ``asset-uris`` handlers sanitize it (the port made
explicit), and OpenLineage's namespace and name. The cache is one JSON string per
connector, already named; only the worker refreshes it, so the webhook never calls Fivetran.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass, replace
from typing import TYPE_CHECKING, Any

import redis

from .exceptions import FivetranApiError
from .fivetran_records import enabled_tables
from .keys import tables_fresh_key, tables_key
from .text import as_text
from .timeutil import now_ms

if TYPE_CHECKING:  # the client brings requests, which the web process never loads
    from .fivetran_api import FivetranClient
    from .settings import Settings

#: Fivetran's destination services per naming family, from Fivetran's own list
#: (terraform-provider-fivetran's destination-services.txt:
#: https://github.com/fivetran/terraform-provider-fivetran/blob/main/destination-services.txt).
POSTGRES_SERVICES = frozenset(
    {
        "postgres_warehouse",
        "postgres_rds_warehouse",
        "postgres_gcp_warehouse",
        "postgres_databricks_warehouse",
        "aurora_postgres_warehouse",
        "azure_postgres_warehouse",
    }
)
#: MariaDB speaks MySQL's protocol: Airflow reads it with the MySQL provider's hook.
MYSQL_SERVICES = frozenset(
    {
        "mysql_warehouse",
        "mysql_rds_warehouse",
        "aurora_warehouse",
        "maria_warehouse",
        "maria_rds_warehouse",
    }
)
#: SQL Server, Azure SQL and Synapse (which Airflow reads with the MSSQL provider's hook).
MSSQL_SERVICES = frozenset(
    {
        "sql_server_warehouse",
        "sql_server_rds_warehouse",
        "azure_sql_database",
        "azure_sql_managed_db_warehouse",
        "azure_sql_data_warehouse",
    }
)
BIGQUERY_SERVICES = frozenset({"big_query", "big_query_dts", "managed_big_query"})
DATABRICKS_SERVICES = frozenset({"databricks", "databricks_via_managed_data_lake"})
#: Events after which a connection's tables or their names may differ.
STALE_EVENTS = frozenset(
    {
        "edit_connector",
        "resync_table",
        "resync_connector",
        "create_connector",
        "change_schema_config",
        "schema_change",
        "schema_config_change",
        "update_schema_config",
    }
)
_PORTS = {"postgres": 5432, "mysql": 3306, "redshift": 5439, "mssql": 1433}


@dataclass(frozen=True)
class DestinationTable:
    schema: str
    table: str
    #: OpenLineage's dataset namespace and name.
    namespace: str
    name: str
    #: The Airflow asset URI.
    uri: str


def _host_port(config: Mapping[str, Any], kind: str) -> str:
    host = str(config.get("host") or "").strip().lower()
    port = config.get("port")
    try:
        port_n = int(port) if port not in (None, "") else _PORTS[kind]
    except (TypeError, ValueError):
        port_n = _PORTS[kind]
    return f"{host}:{port_n}"


def _redshift_authority(config: Mapping[str, Any]) -> str:
    # OpenLineage names a Redshift cluster {cluster_identifier}.{region}:{port}, read from its
    # endpoint "<cluster>.<id>.<region>.redshift[-serverless].amazonaws.com"; a proxy's stays.
    host_port = _host_port(config, "redshift")
    host, _, port = host_port.rpartition(":")
    parts = host.split(".")
    if len(parts) >= 6 and parts[3] in ("redshift", "redshift-serverless"):
        return f"{parts[0]}.{parts[2]}:{port}"
    return host_port


def snowflake_account(host: str) -> str:
    """The account of a Snowflake host ("<account>.snowflakecomputing.com") as OpenLineage
    names it, lower case: ``fix_account_name`` in OpenLineage's
    integration/common/src/openlineage/common/provider/snowflake.py, which Airflow's
    Snowflake hook applies too (apache/airflow's
    providers/snowflake/src/airflow/providers/snowflake/utils/openlineage.py). A locator
    gets its region and cloud (``xy12345.eu-west-1`` is ``xy12345.eu-west-1.aws``,
    ``xy12345`` is ``xy12345.us-west-1.aws``); the organisation-account form stays."""
    account = host.strip().lower().removesuffix(".snowflakecomputing.com")
    parts = account.split(".")
    if "-" in parts[0]:
        return parts[0]
    defaults = {1: ["us-west-1", "aws"], 2: ["aws"]}.get(len(parts), [])  # region, cloud
    return ".".join(parts + defaults)


def _named(schema: str, table: str, namespace: str, *parts: str) -> DestinationTable:
    """``schema.table`` named ``parts`` joined: by dots (OpenLineage), by slashes (the URI)."""
    return DestinationTable(
        schema, table, namespace, ".".join(parts), "/".join([namespace, *parts])
    )


def name_table(
    service: str | None,
    config: Mapping[str, Any],
    schema: str,
    table: str,
    *,
    group_id: str = "",
) -> DestinationTable:
    """Name ``schema.table`` of a destination of kind ``service`` at ``config`` (pure); raise
    ``ValueError`` when ``config`` lacks what the kind's names need. An unknown kind gets
    ``fivetran://{group_id}/{schema}/{table}`` (namespace ``fivetran://{group_id}``): unique,
    though no SQL task's lineage uses it."""
    kind = (service or "").lower()
    database = str(config.get("database") or "")
    if kind in POSTGRES_SERVICES:
        ns = f"postgres://{_host_port(config, 'postgres')}"
        return _named(schema, table, ns, database, schema, table)
    if kind == "redshift":
        return _named(
            schema, table, f"redshift://{_redshift_authority(config)}", database, schema, table
        )
    if kind in MYSQL_SERVICES:
        # In MySQL a schema is a database: Fivetran's schema is the database name.
        return _named(schema, table, f"mysql://{_host_port(config, 'mysql')}", schema, table)
    if kind in MSSQL_SERVICES:
        ns = f"mssql://{_host_port(config, 'mssql')}"
        return _named(schema, table, ns, database, schema, table)
    if kind in BIGQUERY_SERVICES:
        project = str(config.get("project_id") or "")
        if not project:
            raise ValueError(
                f"the {kind} destination's config has no project_id: its tables cannot be "
                "named (bigquery://PROJECT/dataset/table)"
            )
        uri = f"bigquery://{project}/{schema}/{table}"
        return DestinationTable(schema, table, "bigquery", f"{project}.{schema}.{table}", uri)
    if kind == "snowflake":
        # Snowflake stores unquoted names upper case, and OpenLineage and Airflow's Snowflake
        # hook (is_uppercase_names) name them so; Fivetran's name_in_destination is lower.
        ns = f"snowflake://{snowflake_account(str(config.get('host') or ''))}"
        return _named(schema, table, ns, database.upper(), schema.upper(), table.upper())
    if kind in DATABRICKS_SERVICES:
        host = str(config.get("server_host_name") or config.get("host") or "").lower()
        catalog = str(config.get("catalog") or "hive_metastore")
        return _named(schema, table, f"databricks://{host}", catalog, schema, table)
    return _named(schema, table, f"fivetran://{group_id}", schema, table)


def templated(
    tables: Sequence[DestinationTable],
    template: str | None,
    *,
    connector_id: str,
    group_id: str,
    service: str,
) -> list[DestinationTable]:
    if not template:
        return list(tables)
    names = {"connector_id": connector_id, "group_id": group_id, "service": service}
    return [
        replace(t, uri=template.format(**names, schema=t.schema, table=t.table, uri=t.uri))
        for t in tables
    ]


def store_tables(
    client: redis.Redis,
    prefix: str,
    connector_id: str,
    tables: Sequence[DestinationTable],
    *,
    fetched_ms: int,
    fresh_s: int,
    keep_s: int,
) -> None:
    """Cache ``tables`` for ``keep_s``, counted fresh for ``fresh_s`` (one MULTI)."""
    body = json.dumps(
        {"fetched_ms": fetched_ms, "tables": [list(astuple(t)) for t in tables]},
        separators=(",", ":"),
    )
    with client.pipeline(transaction=True) as pipe:
        pipe.set(tables_key(prefix, connector_id), body, ex=keep_s)
        pipe.set(tables_fresh_key(prefix, connector_id), fetched_ms, ex=fresh_s)
        pipe.execute()


def destination_tables(
    client: redis.Redis, prefix: str, connector_id: str
) -> list[DestinationTable] | None:
    raw = client.get(tables_key(prefix, connector_id))
    if raw is None:
        return None
    return [DestinationTable(*row) for row in json.loads(as_text(raw))["tables"]]


def tables_fresh(client: redis.Redis, prefix: str, connector_id: str) -> bool:
    return bool(client.exists(tables_fresh_key(prefix, connector_id)))


def mark_stale(client: redis.Redis, prefix: str, connector_id: str) -> None:
    """Ask for a refresh (the cached list stays in use until then)."""
    client.delete(tables_fresh_key(prefix, connector_id))


log = logging.getLogger(__name__)

#: How long a list is kept past its freshness: used while Fivetran cannot be reached.
KEEP_S = 7 * 86_400


def refresh(
    client: redis.Redis,
    settings: Settings,
    fivetran: FivetranClient,
    connector_id: str,
    group_id: str | None = None,
) -> list[DestinationTable]:
    """Read, name and cache ``connector_id``'s enabled tables (two calls to Fivetran)."""
    if not group_id:
        group_id = fivetran.connection(connector_id).group_id or ""
    destination = fivetran.destination(group_id)
    service = destination.service or ""
    found = enabled_tables(fivetran.schema_config(connector_id))
    try:
        named = [name_table(service, destination.config, s, t, group_id=group_id) for s, t in found]
    except ValueError as exc:  # Fivetran's answer lacks what the names need: say which
        path = f"/v1/destinations/{group_id}"
        raise FivetranApiError("GET", path, str(exc), status=200) from None
    tables = templated(
        named,
        settings.table_uri_template,
        connector_id=connector_id,
        group_id=group_id,
        service=service,
    )
    fresh_s = max(1, int(settings.tables_refresh_hours * 3600))
    store_tables(
        client,
        settings.key_prefix,
        connector_id,
        tables,
        fetched_ms=now_ms(),
        fresh_s=fresh_s,
        keep_s=fresh_s + KEEP_S,
    )
    return tables


def current(
    client: redis.Redis,
    settings: Settings,
    fivetran: FivetranClient | None,
    connector_id: str,
    group_id: str | None = None,
) -> list[DestinationTable] | None:
    """``connector_id``'s cached tables, refreshed first when due (kept while Fivetran fails)."""
    prefix = settings.key_prefix
    cached = destination_tables(client, prefix, connector_id)
    if fivetran is None or (cached is not None and tables_fresh(client, prefix, connector_id)):
        return cached
    try:
        return refresh(client, settings, fivetran, connector_id, group_id)
    except FivetranApiError as exc:
        if cached is None:
            raise
        log.warning("connector %s: using its cached tables, Fivetran failed: %s", connector_id, exc)
        return cached
