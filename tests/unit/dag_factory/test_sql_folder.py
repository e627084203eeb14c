"""Reading a SQL folder: layout, order, exclusions, table dependencies, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_plugin.sql_folder import resolve, scan_folder, tables_of
from fivetran_events.exceptions import SqlFolderError


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, sql in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(sql)
    return root


FOLDER = {
    "accounts.sql": "CREATE TABLE analytics.accounts AS SELECT * FROM salesforce.account",
    "revenue/02_merge.sql": "INSERT INTO analytics.revenue SELECT * FROM stage_revenue "
    "JOIN analytics.accounts USING (id)",
    "revenue/01_stage.sql": "WITH c AS (SELECT * FROM stripe.charge) "
    "CREATE TABLE stage_revenue AS SELECT * FROM c",
    "revenue/__draft.sql": "SELECT * FROM nowhere.at_all",
    "__old/x.sql": "SELECT * FROM nowhere.at_all",
    "README.md": "not sql",
}
SCHEMAS = {"salesforce": "sf_conn", "stripe": "stripe_conn"}


class TestScan:
    def test_layout_and_order(self, tmp_path: Path) -> None:
        """Top-level files are groups of one; a sub-folder's files run in name order."""
        folder = scan_folder(write(tmp_path, FOLDER))
        assert [(g.group_id, [t.task_id for t in g.tasks]) for g in folder.groups] == [
            ("accounts", ["accounts"]),
            ("revenue", ["01_stage", "02_merge"]),
        ]

    def test_reads_and_writes(self, tmp_path: Path) -> None:
        folder = scan_folder(write(tmp_path, FOLDER))
        revenue = folder.groups[1]
        assert revenue.writes == {"stage_revenue", "analytics.revenue"}
        # stage_revenue is written by 01 before 02 reads it: internal to the group.
        assert revenue.reads == {"stripe.charge", "analytics.accounts"}

    def test_tables_of_ignores_ctes(self) -> None:
        reads, writes = tables_of(
            "WITH x AS (SELECT 1 FROM a.b) MERGE INTO c.d USING x ON 1=1 WHEN MATCHED THEN DELETE"
        )
        assert reads == {"a.b"} and writes == {"c.d"}


class TestResolve:
    def test_connectors_and_group_order(self, tmp_path: Path) -> None:
        """Reads in a connector's schema depend on it; reads of a sibling's output on it."""
        res = resolve(scan_folder(write(tmp_path, FOLDER)), SCHEMAS)
        assert res.connectors == {"accounts": {"sf_conn"}, "revenue": {"stripe_conn"}}
        assert res.upstream_groups == {"accounts": set(), "revenue": {"accounts"}}
        assert res.unknown == []

    def test_unknown_references_are_reported(self, tmp_path: Path) -> None:
        files = {**FOLDER, "extra.sql": "SELECT * FROM hubspot.contact JOIN ref.country USING(c)"}
        res = resolve(scan_folder(write(tmp_path, files)), SCHEMAS)
        assert sorted(t for _, t in res.unknown) == ["hubspot.contact", "ref.country"]
        assert all(p.name == "extra.sql" for p, _ in res.unknown)
        res = resolve(scan_folder(tmp_path), SCHEMAS, external=["ref.*", "hubspot.contact"])
        assert res.unknown == []


class TestErrors:
    @pytest.mark.parametrize(
        ("files", "culprit", "words"),
        [
            ({"a.sql": "SELEC * FRM"}, "a.sql", "does not parse"),
            ({"g/01.sql": "SELECT 1", "g/02.sql": "   "}, "02.sql", "empty"),
            ({"g/inner/01.sql": "SELECT 1"}, "inner", "not supported"),
            ({"__only.sql": "SELECT 1"}, "", "no .sql files"),
        ],
    )
    def test_error_names_the_file(
        self, tmp_path: Path, files: dict[str, str], culprit: str, words: str
    ) -> None:
        with pytest.raises(SqlFolderError) as info:
            scan_folder(write(tmp_path, files))
        assert words in str(info.value)
        assert str(info.value).split(":")[0].endswith(culprit or tmp_path.name)

    def test_missing_folder(self, tmp_path: Path) -> None:
        with pytest.raises(SqlFolderError, match="is not a folder"):
            scan_folder(tmp_path / "nope")


class TestTemplates:
    def test_jinja_is_read_through(self) -> None:
        """Templated SQL parses; both branches of an if count, expressions are opaque."""
        reads, writes = tables_of(
            "{# reload on a re-sync #}{% if full_refresh %}TRUNCATE TABLE a.t;{% endif %}\n"
            "INSERT INTO a.t SELECT * FROM s.src WHERE d > '{{ ds }}' AND x = {{ params.x }}"
        )
        assert reads == {"s.src"} and writes == {"a.t"}

    def test_a_script_reading_its_own_table_needs_nobody(self) -> None:
        reads, writes = tables_of(
            "DROP TABLE IF EXISTS t; CREATE TABLE t AS SELECT * FROM s.x;"
            "UPDATE t SET a = 1; INSERT INTO u SELECT * FROM t"
        )
        assert reads == {"s.x"} and writes == {"t", "u"}
