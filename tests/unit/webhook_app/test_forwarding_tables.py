"""The pure parts of a table-level delivery's expansion: the listing's filter, a table's extra."""

from __future__ import annotations

from fivetran_events.destinations import name_table
from webhook_app.forwarding.tables import common_prefix, table_extra

PG = {"host": "h", "database": "d"}
SYNC = {"sync_id": "s1", "full_refresh": True, "full_refresh_tables": ["sales.orders"]}


class TestCommonPrefix:
    def test_cut_after_the_last_separator_both_share(self) -> None:
        """A listing under it finds every table, and nothing of a sibling schema's name."""
        uris = ["postgres://h:5432/d/sales/orders", "postgres://h:5432/d/sales/order_items"]
        assert common_prefix(uris) == "postgres://h:5432/d/sales/"

    def test_snowflake_names_cut_at_the_dot(self) -> None:
        uris = ["snowflake://a/DB.S1.T", "snowflake://a/DB.S2.T"]
        assert common_prefix(uris) == "snowflake://a/DB."

    def test_one_table_is_its_own_prefix(self) -> None:
        assert common_prefix(["bigquery://p/ds/t"]) == "bigquery://p/ds/t"


class TestTableExtra:
    def test_full_refresh_only_on_the_resynced_table(self) -> None:
        orders = name_table("postgres_warehouse", PG, "sales", "orders")
        items = name_table("postgres_warehouse", PG, "sales", "items")
        assert table_extra(SYNC, orders)["full_refresh"] is True
        assert table_extra(SYNC, items)["full_refresh"] is False
        assert "full_refresh_tables" not in table_extra(SYNC, items)

    def test_a_bare_table_name_matches_too(self) -> None:
        """Fivetran's resync_table may name the table without its schema."""
        sync = {**SYNC, "full_refresh_tables": ["orders"]}
        t = name_table("postgres_warehouse", PG, "sales", "orders")
        assert table_extra(sync, t)["full_refresh"] is True

    def test_a_whole_resync_refreshes_every_table(self) -> None:
        """resync_connector: full_refresh without a table list, true everywhere."""
        t = name_table("postgres_warehouse", PG, "sales", "items")
        out = table_extra({"sync_id": "s1", "full_refresh": True}, t)
        assert out["full_refresh"] is True
        assert (out["schema"], out["table"], out["dataset_name"]) == (
            "sales",
            "items",
            "d.sales.items",
        )
