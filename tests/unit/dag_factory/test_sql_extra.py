"""Without the [sql] extra, importing the DAG factory names the extra and how to get it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator

import pytest

from fivetran_events.exceptions import MissingExtraError

FACTORY = ("airflow_plugin.dag_factory", "airflow_plugin.sql_folder")


@pytest.fixture
def fresh_factory() -> Iterator[None]:
    """Forget the factory's modules (and restore them), so the next import runs afresh."""
    saved = {name: sys.modules.pop(name) for name in FACTORY if name in sys.modules}
    yield
    for name in FACTORY:
        sys.modules.pop(name, None)
    sys.modules.update(saved)


@pytest.mark.parametrize("missing", ["sqlglot", "airflow.providers.common.sql"])
def test_the_factory_without_sql_names_the_extra(
    missing: str, fresh_factory: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # import and find_spec fail on it
    with pytest.raises(MissingExtraError) as caught:
        importlib.import_module("airflow_plugin.dag_factory")
    message = str(caught.value)
    assert f"needs the [sql] extra, which is not installed (no module {missing!r})" in message
    assert "[airflow,sql]" in message and "docs/install.md" in message
    assert isinstance(caught.value, ImportError) and caught.value.name == missing


def test_with_sql_it_imports(fresh_factory: None) -> None:
    assert importlib.import_module("airflow_plugin.dag_factory").dags_from_folder
