"""A relative folder is the calling DAG file's, found without reading any frame's source.

The DAG processor parses every DAG file again and again, so the factory must not pay
for ``inspect.stack()``, which reads the source of every frame on the stack.
"""

from __future__ import annotations

import linecache
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_plugin.compat import AIRFLOW_V_3
from testkit.sql_folders import SALES, folder

# The DAG factory builds Airflow 3 DAGs (airflow.sdk); the version matrix runs this folder on
# Airflow 2 as well, where there is nothing to build (docs/compatibility.md).
pytestmark = pytest.mark.skipif(not AIRFLOW_V_3, reason="the DAG factory needs Airflow 3")

DAG_FILE = """
from airflow_plugin.dag_factory import build_dag, dags_from_folder

by_build = build_dag("sales")
by_folder = dags_from_folder("sales")
"""


def record_source_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every file whose source lines ``linecache`` is asked for from now on."""
    seen: list[str] = []
    real: Callable[..., list[str]] = linecache.getlines

    def spy(filename: str, *args: Any, **kwargs: Any) -> list[str]:
        seen.append(filename)
        return real(filename, *args, **kwargs)

    monkeypatch.setattr(linecache, "getlines", spy)
    return seen


def test_relative_folders_are_the_dag_files_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both entry points resolve "sales" next to the DAG file, whatever the cwd."""
    from airflow_plugin.dag_factory import build_dag

    # Airflow reads the stack once per process, when its providers manager starts.
    build_dag(folder(tmp_path, SALES))
    source_reads = record_source_reads(monkeypatch)
    dag_file = tmp_path / "sales_dag.py"
    dag_file.write_text(DAG_FILE)
    monkeypatch.chdir(Path("/"))
    made = runpy.run_path(str(dag_file))
    assert made["by_build"].dag_id == made["by_folder"].dag_id == "sales"
    assert str(dag_file) not in source_reads
