"""The Airflow side is laid out as Airflow's providers are, and says so to Airflow.

Airflow stores a deferred task's trigger by the dotted path its ``serialize()`` returns
and imports what ``get_provider_info`` names, so each of those must name where the
class lives now.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

import pytest

from airflow_plugin.compat import AIRFLOW_V_3_3
from airflow_plugin.provider import get_provider_info
from testkit.imports import ROOT, python_files

#: The longest a module of airflow_plugin may grow before it is split by concern.
MAX_LINES = 450


#: The module that needs Airflow 3.3+; older Airflow gets an ImportError naming it.
WATCHER = "airflow_plugin.triggers.watcher"


def import_string(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(import_module(module), name)


def triggers() -> list[Any]:
    from airflow_plugin.triggers.decision import FivetranSyncDecisionTrigger
    from airflow_plugin.triggers.sync import FivetranSyncRequestTrigger

    found: list[Any] = [
        FivetranSyncDecisionTrigger("c1", 123, recheck_interval=5),
        FivetranSyncRequestTrigger("c1", 123, force=True),
    ]
    if AIRFLOW_V_3_3:  # the watcher's (.ci/airflow-matrix.sh runs these on older Airflow)
        from airflow_plugin.triggers.watcher import FivetranSyncWatcherTrigger

        found.append(FivetranSyncWatcherTrigger("c1", poll_interval=7))
    return found


class TestTriggers:
    @pytest.mark.parametrize("trigger", triggers(), ids=lambda t: type(t).__name__)
    def test_serialize_names_the_class_where_it_lives(self, trigger: Any) -> None:
        """The stored path is the class's module and name; it rebuilds an equal trigger."""
        path, kwargs = trigger.serialize()
        cls = type(trigger)
        assert path == f"{cls.__module__}.{cls.__qualname__}"
        assert import_string(path)(**kwargs).serialize() == (path, kwargs)


class TestProviderInfo:
    def test_every_module_it_lists_imports(self) -> None:
        """Hooks, operators, sensors and triggers: each listed module exists, by role."""
        info = get_provider_info()
        for role in ("hooks", "operators", "sensors", "triggers"):
            (entry,) = info[role]
            for module in entry["python-modules"]:
                assert module.startswith(f"airflow_plugin.{role}"), (role, module)
                if module == WATCHER and not AIRFLOW_V_3_3:
                    with pytest.raises(ImportError, match=r"needs Airflow 3\.3\+ \(this is"):
                        import_module(module)
                else:
                    import_module(module)

    def test_each_connection_type_names_its_hook(self) -> None:
        """The history's Redis and Fivetran's API, each with a hook of that type and name."""
        types = {c["connection-type"]: c for c in get_provider_info()["connection-types"]}
        assert set(types) == {"fivetran_events", "fivetran"}
        for conn_type, conn in types.items():
            hook = import_string(conn["hook-class-name"])
            assert hook.__module__ == "airflow_plugin.hooks"
            assert (hook.conn_type, hook.hook_name) == (conn_type, conn["hook-name"])
            assert (
                hook.get_ui_field_behaviour()["hidden_fields"]
                == (conn["ui-field-behaviour"]["hidden-fields"])
            )


def test_no_module_outgrows_its_concern() -> None:
    """Every module of airflow_plugin stays under MAX_LINES lines."""
    long = {
        str(path.relative_to(ROOT)): n
        for path in python_files(ROOT, "airflow_plugin")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}
