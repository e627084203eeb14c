"""The DAG a SQL folder becomes: tasks, groups, order, schedule, outlets, errors.

Built in-process from files; the cases that read the history or the table lists through
Redis are in tests/integration/dag_factory/test_dag_shape.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_plugin.compat import AIRFLOW_V_3
from fivetran_events.exceptions import SqlFolderError
from testkit.sql_folders import SALES, folder, sales_tables

# The DAG factory builds Airflow 3 DAGs (airflow.sdk); the version matrix runs this folder on
# Airflow 2 as well, where there is nothing to build (docs/compatibility.md).
pytestmark = pytest.mark.skipif(not AIRFLOW_V_3, reason="the DAG factory needs Airflow 3")


def shape(dag: Any) -> dict[str, list[str]]:
    return {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks}


class TestAssetScheduled:
    def test_shape_schedule_outlets(self, tmp_path: Path) -> None:
        """Files become tasks, a sub-folder a chained group after the group it reads."""
        from airflow_plugin.dag_factory import build_dag

        dag = build_dag(folder(tmp_path, SALES))
        assert dag.dag_id == "sales"
        assert shape(dag) == {
            "accounts": [],
            "revenue.01_stage": ["accounts"],
            "revenue.02_merge": ["revenue.01_stage"],
        }
        uris = {a.uri for a in dag.timetable.asset_condition.objects}
        assert uris == {"fivetran://connector/sf_conn", "fivetran://connector/stripe_conn"}
        assert type(dag.timetable.asset_condition).__name__ == "AssetAll"
        outlets = {t.task_id: sorted(o.uri for o in t.outlets) for t in dag.tasks}
        assert outlets == {
            "accounts": ["sql://warehouse/accounts"],
            "revenue.01_stage": [],
            "revenue.02_merge": ["sql://warehouse/revenue", "sql://warehouse/stage"],
        }

    def test_any_of_the_connectors(self, tmp_path: Path) -> None:
        from airflow_plugin.dag_factory import build_dag

        dag = build_dag(folder(tmp_path, SALES), assets="any")
        assert type(dag.timetable.asset_condition).__name__ == "AssetAny"

    def test_schema_map_from_outside(self, tmp_path: Path) -> None:
        """Mappings can come from the recorded connectors' names instead of dag.toml."""
        from airflow_plugin.dag_factory import build_dag

        files = {k: v for k, v in SALES.items() if k != "dag.toml"}
        dag = build_dag(
            folder(tmp_path, files), schema_to_connector={"salesforce": "a", "stripe": "b"}
        )
        assert {a.uri for a in dag.timetable.asset_condition.objects} == {
            "fivetran://connector/a",
            "fivetran://connector/b",
        }


class TestRefusals:
    @pytest.mark.parametrize(
        ("files", "words"),
        [
            ({**SALES, "x.sql": "SELECT * FROM hubspot.contact"}, "hubspot.contact"),
            ({**SALES, "dag.toml": "schedule = 'assets'\n"}, "salesforce.account"),
            ({"a.sql": "SELECT 1"}, "no file reads a Fivetran connector"),
            ({**SALES, "dag.toml": "bogus = 1\n" + SALES["dag.toml"]}, "unknown setting"),
            ({**SALES, "dag.toml": SALES["dag.toml"] + "typo = 1\n"}, "connectors.typo"),
            ({**SALES, "dag.toml": "[reset_allowed]\nx = 'no'\n"}, "reset_allowed.x"),
            ({**SALES, "dag.toml": "connectors = ["}, "not valid TOML"),
            (
                {
                    "a.sql": "INSERT INTO x SELECT * FROM y",
                    "b.sql": "INSERT INTO y SELECT * FROM x",
                    "dag.toml": "schedule = '@daily'\n",
                },
                "cycle",
            ),
        ],
    )
    def test_import_error_names_the_problem(
        self, tmp_path: Path, files: dict[str, str], words: str
    ) -> None:
        from airflow_plugin.dag_factory import build_dag

        with pytest.raises(SqlFolderError, match=words):
            build_dag(folder(tmp_path, files))


class TestTimeScheduled:
    def test_a_sensor_per_connector_in_front_of_its_readers(self, tmp_path: Path) -> None:
        """A cron schedule puts FivetranDateTimeSensor(s) before the groups that read them."""
        from airflow_plugin.dag_factory import build_dag

        toml = SALES["dag.toml"].replace(
            "[connectors]",
            'schedule = "@daily"\n'
            '[sensor]\nmode = "reschedule"\n'
            "propagate_failures_forward = false\n[connectors]",
        )
        dag = build_dag(folder(tmp_path, {**SALES, "dag.toml": toml}))
        assert shape(dag) == {
            "wait_for_sf_conn": [],
            "wait_for_stripe_conn": [],
            "accounts": ["wait_for_sf_conn"],
            "revenue.01_stage": ["accounts", "wait_for_stripe_conn"],
            "revenue.02_merge": ["revenue.01_stage"],
        }
        sensor = dag.get_task("wait_for_sf_conn")
        assert type(sensor).__name__ == "FivetranDateTimeSensor"
        assert sensor.connector_id == "sf_conn" and sensor.mode == "reschedule"
        assert sensor.propagate_failures_forward is False


class TestChaining:
    def test_a_folder_waits_for_another_folders_output(self, tmp_path: Path) -> None:
        """Folder B reads what folder A writes: B is scheduled on A's outlet dataset."""
        from airflow_plugin.dag_factory import build_dag

        a = build_dag(folder(tmp_path, SALES, "a"))
        b = build_dag(
            folder(
                tmp_path,
                {
                    "report.sql": "CREATE TABLE report AS SELECT * FROM revenue",
                    "dag.toml": 'upstream = ["revenue"]\n',
                },
                "b",
            )
        )
        written = {o.uri for t in a.tasks for o in t.outlets}
        waited = {x.uri for x in b.timetable.asset_condition.objects}
        assert waited == {"sql://warehouse/revenue"} and waited <= written


class TestTableAssets:
    """With table assets, a DAG waits for the tables it reads, named as the worker names
    them, and for a connector's whole asset only where its table list lacks the table."""

    def test_the_tables_read_replace_their_connector(self, tmp_path: Path) -> None:
        from airflow_plugin.dag_factory import build_dag

        dag = build_dag(folder(tmp_path, SALES), table_assets=True, tables=sales_tables())
        uris = {a.uri for a in dag.timetable.asset_condition.objects}
        # salesforce.account is a cached table; stripe has no list: its connector stays
        assert uris == {
            "postgres://wh:5432/analytics/salesforce/account",
            "fivetran://connector/stripe_conn",
        }

    def test_the_granularity_turns_it_on(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from airflow_plugin.dag_factory import build_dag

        monkeypatch.setenv("FIVETRAN_EVENTS_ASSET_GRANULARITY", "both")
        dag = build_dag(folder(tmp_path, SALES), tables=sales_tables())
        uris = {a.uri for a in dag.timetable.asset_condition.objects}
        assert "postgres://wh:5432/analytics/salesforce/account" in uris
        monkeypatch.setenv("FIVETRAN_EVENTS_ASSET_GRANULARITY", "connector")
        dag = build_dag(folder(tmp_path, SALES, name="again"), tables=sales_tables())
        assert "fivetran://connector/sf_conn" in {
            a.uri for a in dag.timetable.asset_condition.objects
        }

    def test_a_bad_granularity_is_named(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Read through the settings: a word they refuse fails naming the variable."""
        from airflow_plugin.dag_factory import build_dag
        from fivetran_events.exceptions import ConfigurationError

        monkeypatch.setenv("FIVETRAN_EVENTS_ASSET_GRANULARITY", "column")
        with pytest.raises(ConfigurationError, match="FIVETRAN_EVENTS_ASSET_GRANULARITY"):
            build_dag(folder(tmp_path, SALES), tables=sales_tables())
