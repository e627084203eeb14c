"""A folder of SQL files for the DAG factory's tests (unit and integration tiers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SALES = {
    "accounts.sql": "CREATE TABLE IF NOT EXISTS accounts AS SELECT * FROM salesforce.account",
    "revenue/01_stage.sql": "CREATE TABLE stage AS SELECT * FROM stripe.charge",
    "revenue/02_merge.sql": "INSERT INTO revenue SELECT * FROM stage JOIN accounts USING (id)",
    "dag.toml": '[connectors]\nsalesforce = "sf_conn"\nstripe = "stripe_conn"\n',
}


def folder(tmp_path: Path, files: dict[str, str], name: str = "sales") -> Path:
    root = tmp_path / name
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def sales_tables() -> dict[str, Any]:
    """SALES's salesforce connector's table list, named as the worker names a Postgres
    destination's tables (stripe has none: its connector's asset stays)."""
    from fivetran_events.destinations import name_table

    pg = {"host": "wh", "database": "analytics"}
    return {
        "sf_conn": [
            name_table("postgres_warehouse", pg, "salesforce", "account"),
            name_table("postgres_warehouse", pg, "salesforce", "lead"),
        ]
    }
