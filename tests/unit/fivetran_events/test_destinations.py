"""Destination tables named as Airflow's asset URI handlers and OpenLineage name them."""

from __future__ import annotations

import pytest

from fivetran_events.destinations import (
    DestinationTable,
    name_table,
    snowflake_account,
    templated,
)
from testkit.fivetran_api import DESTINATION_SERVICES

# What Airflow's providers do with an asset URI of each kind (``sanitize_uri`` and
# ``convert_asset_to_openlineage`` in airflow/providers/<p>/assets/<kind>.py of
# apache-airflow-providers-postgres 7.1.1, -mysql, -google 22.8.0, -snowflake 6.20.0,
# -databricks and -amazon (redshift)): the path's part count, the port filled in, and
# the OpenLineage dataset the URI converts to. The providers themselves are not
# installed here (their database drivers are heavy), so their rules are restated.
PROVIDER_RULES: dict[str, tuple[int, int | None, str]] = {
    # scheme: (path parts after the authority, default port, how the name is joined)
    "postgres": (3, 5432, "{0}.{1}.{2}"),
    "mysql": (2, 3306, "{0}.{1}"),
    "bigquery": (2, None, "{host}.{0}.{1}"),
    "snowflake": (3, None, "{0}.{1}.{2}"),
    "databricks": (3, None, "{0}.{1}.{2}"),
    "redshift": (3, 5439, "{0}.{1}.{2}"),
    "mssql": (3, 1433, "{0}.{1}.{2}"),  # apache-airflow-providers-microsoft-mssql 4.7.2
}


def airflow_reads(uri: str) -> tuple[str, str]:
    """The OpenLineage dataset Airflow's provider converts ``uri`` to, after checking that
    its ``sanitize_uri`` would leave the URI as it is (already canonical)."""
    from urllib.parse import urlsplit

    parsed = urlsplit(uri)
    parts, port, joined = PROVIDER_RULES[parsed.scheme]
    path = parsed.path.split("/")[1:]
    assert parsed.netloc and len(path) == parts and all(path), uri
    if port is not None:
        assert parsed.port is not None, f"{uri}: Airflow would add :{port}"
    if parsed.scheme == "bigquery":
        return "bigquery", joined.format(*path, host=parsed.netloc)
    return f"{parsed.scheme}://{parsed.netloc}", joined.format(*path)


class TestAirflowAndOpenLineageMeet:
    @pytest.mark.parametrize(
        ("service", "config"),
        [
            ("postgres_warehouse", {"host": "db.example.com", "database": "wh"}),
            ("postgres_rds_warehouse", {"host": "h", "port": 6543, "database": "wh"}),
            ("mysql_rds_warehouse", {"host": "m", "database": "x"}),
            ("maria_warehouse", {"host": "m", "port": 3307, "database": "x"}),
            ("sql_server_warehouse", {"host": "SQL.example.com", "database": "wh"}),
            ("azure_sql_database", {"host": "x.database.windows.net", "database": "wh"}),
            ("big_query", {"project_id": "acme-prod"}),
            ("big_query_dts", {"project_id": "acme-prod"}),
            ("snowflake", {"host": "xy12345.eu-west-1.snowflakecomputing.com", "database": "raw"}),
            ("databricks", {"server_host_name": "adb-1.azuredatabricks.net", "catalog": "main"}),
            (
                "redshift",
                {"host": "analytics.c1abc.eu-west-1.redshift.amazonaws.com", "database": "dev"},
            ),
        ],
    )
    def test_our_uri_is_canonical_and_converts_to_our_dataset(
        self, service: str, config: dict[str, object]
    ) -> None:
        """Airflow keeps our asset URI as it is and reads it as the very dataset our
        OpenLineage run writes: an asset event and a lineage edge name one table."""
        t = name_table(service, config, "shop", "orders")
        assert airflow_reads(t.uri) == (t.namespace, t.name)

    def test_the_check_fails_on_a_uri_airflow_would_reject(self) -> None:
        """The rule can fail: the dotted Snowflake form Airflow's handler refuses."""
        with pytest.raises(AssertionError):
            airflow_reads("snowflake://acct/RAW.SHOP.ORDERS")


class TestNamingPerDestinationKind:
    @pytest.mark.parametrize(
        "service", ["postgres_warehouse", "postgres_rds_warehouse", "aurora_postgres_warehouse"]
    )
    def test_postgres_makes_the_port_explicit_and_keeps_three_path_parts(
        self, service: str
    ) -> None:
        """Airflow's postgres handler fills in 5432; OpenLineage names db.schema.table."""
        t = name_table(
            service, {"host": "DB.example.com", "database": "wh"}, "salesforce", "account"
        )
        assert t == DestinationTable(
            "salesforce",
            "account",
            "postgres://db.example.com:5432",
            "wh.salesforce.account",
            "postgres://db.example.com:5432/wh/salesforce/account",
        )

    def test_postgres_keeps_a_configured_port(self) -> None:
        """A port Fivetran reports (as text or a number) is the one in the URI."""
        t = name_table(
            "postgres_warehouse", {"host": "h", "port": "6543", "database": "d"}, "s", "t"
        )
        assert t.uri == "postgres://h:6543/d/s/t"

    def test_bigquery_uses_the_project_as_the_authority(self) -> None:
        """bigquery://project/dataset/table; OpenLineage's namespace is plain 'bigquery'."""
        t = name_table(
            "big_query", {"project_id": "acme-prod", "data_set_location": "US"}, "hubspot", "deal"
        )
        assert (t.uri, t.namespace, t.name) == (
            "bigquery://acme-prod/hubspot/deal",
            "bigquery",
            "acme-prod.hubspot.deal",
        )

    def test_snowflake_names_are_upper_case_and_the_account_has_its_cloud(self) -> None:
        """Fivetran reports lower-case names; Snowflake stores them upper case, and
        OpenLineage and Airflow's Snowflake hook name them so, with the account's cloud."""
        config = {"host": "XY12345.eu-west-1.snowflakecomputing.com", "database": "raw"}
        t = name_table("snowflake", config, "stripe", "charge")
        assert t.namespace == "snowflake://xy12345.eu-west-1.aws"
        assert t.name == "RAW.STRIPE.CHARGE"
        assert t.uri == "snowflake://xy12345.eu-west-1.aws/RAW/STRIPE/CHARGE"
        assert (t.schema, t.table) == ("stripe", "charge")  # Fivetran's names, for matching

    @pytest.mark.parametrize(
        ("host", "account"),
        [
            # What apache-airflow-providers-snowflake 6.20.0's fix_account_name gives
            # (airflow/providers/snowflake/utils/openlineage.py): the provider is not
            # installed here (it brings the Snowflake connector, Snowpark, pandas and
            # pyarrow), so its answers are restated; OpenLineage's own is compared below.
            ("xy12345.eu-west-1", "xy12345.eu-west-1.aws"),
            ("xy12345", "xy12345.us-west-1.aws"),
            ("myorg-analytics", "myorg-analytics"),
            ("xy12345.east-us-2.azure", "xy12345.east-us-2.azure"),
            ("xy12345.us-east-2.aws", "xy12345.us-east-2.aws"),
            ("xy12345.eu-west-1.privatelink", "xy12345.eu-west-1.privatelink"),
        ],
    )
    def test_snowflake_account_as_openlineage_and_airflow_name_it(
        self, host: str, account: str
    ) -> None:
        from openlineage.common.provider.snowflake import (  # type: ignore[import-untyped]
            fix_account_name,
        )

        assert snowflake_account(f"{host}.snowflakecomputing.com") == account
        assert fix_account_name(host) == account

    def test_redshift_names_cluster_and_region_as_openlineage_does(self) -> None:
        """redshift://{cluster_identifier}.{region}:{port}, from the cluster's endpoint."""
        config = {"host": "analytics.c1abc.eu-west-1.redshift.amazonaws.com", "database": "dev"}
        t = name_table("redshift", config, "s", "t")
        assert t.namespace == "redshift://analytics.eu-west-1:5439"
        assert t.uri == "redshift://analytics.eu-west-1:5439/dev/s/t"

    def test_redshift_defaults_to_port_5439_and_keeps_another_host_whole(self) -> None:
        t = name_table("redshift", {"host": "proxy.internal", "database": "dev"}, "s", "t")
        assert t.uri == "redshift://proxy.internal:5439/dev/s/t"
        assert t.name == "dev.s.t"

    def test_mysql_has_no_schema_level_beyond_the_database(self) -> None:
        """In MySQL Fivetran's schema is the database: mysql://host:3306/schema/table."""
        t = name_table(
            "mysql_rds_warehouse", {"host": "m", "database": "ignored"}, "shop", "orders"
        )
        assert (t.uri, t.name) == ("mysql://m:3306/shop/orders", "shop.orders")

    def test_databricks_names_the_catalog(self) -> None:
        config = {"server_host_name": "adb-1.azuredatabricks.net", "catalog": "main"}
        t = name_table("databricks", config, "s", "t")
        assert t.uri == "databricks://adb-1.azuredatabricks.net/main/s/t"
        assert t.name == "main.s.t"

    @pytest.mark.parametrize("service", ["maria_warehouse", "maria_rds_warehouse"])
    def test_mariadb_is_named_as_mysql(self, service: str) -> None:
        """Airflow reads MariaDB with the MySQL provider: mysql://host:3306/schema/table."""
        t = name_table(service, {"host": "M", "database": "x"}, "shop", "orders")
        assert (t.uri, t.namespace, t.name) == (
            "mysql://m:3306/shop/orders",
            "mysql://m:3306",
            "shop.orders",
        )

    def test_sql_server_is_mssql_as_openlineage_names_it(self) -> None:
        """mssql://{host}:{port} and {database}.{schema}.{table} (OpenLineage's naming
        spec; Airflow's MSSQL provider's asset URI), port 1433 by default."""
        config = {"host": "sql.example.com", "database": "wh"}
        t = name_table("sql_server_rds_warehouse", config, "dbo", "orders")
        assert (t.uri, t.namespace, t.name) == (
            "mssql://sql.example.com:1433/wh/dbo/orders",
            "mssql://sql.example.com:1433",
            "wh.dbo.orders",
        )

    @pytest.mark.parametrize("config", [{}, {"project_id": ""}, {"data_set_location": "US"}])
    def test_managed_bigquery_without_a_project_is_an_error(self, config: dict[str, str]) -> None:
        """Never bigquery:///dataset/table: the error names the missing field."""
        with pytest.raises(ValueError, match=r"managed_big_query.*project_id"):
            name_table("managed_big_query", config, "s", "t")

    def test_every_kind_named_is_one_fivetran_has(self) -> None:
        """The families hold only Fivetran's services (terraform-provider-fivetran's list,
        testkit.fivetran_api.DESTINATION_SERVICES); a name it lacks is an unknown kind."""
        from fivetran_events import destinations as d

        named = set().union(
            d.POSTGRES_SERVICES,
            d.MYSQL_SERVICES,
            d.MSSQL_SERVICES,
            d.BIGQUERY_SERVICES,
            d.DATABRICKS_SERVICES,
            {"redshift", "snowflake"},
        )
        assert named <= DESTINATION_SERVICES, named - DESTINATION_SERVICES
        for service in ("heroku_postgres_warehouse", "azure_mysql_warehouse"):
            assert name_table(service, {"host": "h"}, "s", "t", group_id="g").uri.startswith(
                "fivetran://g/"
            )

    def test_an_unknown_kind_gets_a_unique_fivetran_uri(self) -> None:
        """No lineage meets it, but two tables never share a URI."""
        t = name_table("some_new_lake", {}, "s", "t", group_id="grp")
        assert (t.uri, t.namespace) == ("fivetran://grp/s/t", "fivetran://grp")


class TestTemplate:
    def test_a_template_overrides_the_uri_only(self) -> None:
        """The OpenLineage names stay the naming's: only the Airflow URI is the user's."""
        t = name_table("postgres_warehouse", {"host": "h", "database": "d"}, "s", "t")
        (out,) = templated(
            [t], "x://{group_id}/{schema}.{table}", connector_id="c", group_id="g", service="p"
        )
        assert out.uri == "x://g/s.t"
        assert (out.namespace, out.name) == (t.namespace, t.name)

    def test_no_template_keeps_the_naming(self) -> None:
        t = name_table("postgres_warehouse", {"host": "h", "database": "d"}, "s", "t")
        assert templated([t], None, connector_id="c", group_id="g", service="p") == [t]


class TestSettings:
    def test_granularity_defaults_to_the_connector(self) -> None:
        from fivetran_events.settings import Settings

        assert Settings().asset_granularity == "connector"

    @pytest.mark.parametrize("value", ["table", "both", "connector"])
    def test_granularity_reads_the_environment(
        self, monkeypatch: pytest.MonkeyPatch, value: str
    ) -> None:
        from fivetran_events.settings import Settings

        monkeypatch.setenv("FIVETRAN_EVENTS_ASSET_GRANULARITY", value)
        assert Settings().asset_granularity == value

    def test_an_unknown_granularity_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from pydantic import ValidationError

        from fivetran_events.settings import Settings

        monkeypatch.setenv("FIVETRAN_EVENTS_ASSET_GRANULARITY", "column")
        with pytest.raises(ValidationError, match="asset_granularity"):
            Settings()

    def test_a_table_template_with_an_unknown_field_is_refused(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The message names the fields a template may use."""
        from pydantic import ValidationError

        from fivetran_events.settings import Settings

        monkeypatch.setenv("FIVETRAN_EVENTS_TABLE_URI_TEMPLATE", "x://{database}/{table}")
        with pytest.raises(ValidationError, match=r"\{schema\}"):
            Settings()


class TestEnabledTables:
    def test_names_in_the_destination_of_enabled_tables_of_enabled_schemas(self) -> None:
        """A disabled schema hides its tables; a missing name_in_destination is the
        source's name; anything not an object is skipped, never an error."""
        from fivetran_events.fivetran_records import enabled_tables

        config = {
            "schemas": {
                "Sales": {
                    "name_in_destination": "sales",
                    "enabled": True,
                    "tables": {
                        "Orders": {"name_in_destination": "orders", "enabled": True},
                        "Notes": {"enabled": False},
                        "items": {},
                        "odd": "not an object",
                    },
                },
                "hr": {"enabled": False, "tables": {"staff": {"enabled": True}}},
                "broken": None,
            }
        }
        assert enabled_tables(config) == [("sales", "items"), ("sales", "orders")]
        assert enabled_tables({}) == []
