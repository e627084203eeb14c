"""The layout's rules, read from the source: what imports what, and where things are."""

from __future__ import annotations

import re

import pytest

from testkit.imports import ROOT, imported_modules, python_files

HARNESSES = {"testkit.airflow_harness", "testkit.airflow2_harness"}
#: The production packages, whose every module the architecture page's map names.
PACKAGES = ("fivetran_events", "webhook_app", "airflow_plugin")


def mapped_modules(page: str) -> set[str]:
    """Return the modules the "Where things are" table of ``page`` names (first column)."""
    section = page.split("\n## Where things are\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+\.py)` \|", section, flags=re.MULTILINE))


class TestImports:
    def test_no_test_module_imports_another(self) -> None:
        """Shared code lives in helpers (testkit/, a folder's helper module), never in a test."""
        offenders = {
            str(path.relative_to(ROOT)): sorted(
                m for m in imported_modules(path, ROOT) if m.rsplit(".", 1)[-1].startswith("test_")
            )
            for path in python_files(ROOT, "tests")
        }
        assert {k: v for k, v in offenders.items() if v} == {}

    def test_benchmarks_do_not_import_tests(self) -> None:
        """bench/ uses testkit/, so moving or renaming a test never breaks a benchmark."""
        offenders = {
            str(path.relative_to(ROOT)): sorted(
                m for m in imported_modules(path, ROOT) if m == "tests" or m.startswith("tests.")
            )
            for path in python_files(ROOT, "bench")
        }
        assert {k: v for k, v in offenders.items() if v} == {}

    @pytest.mark.parametrize("conftest", ["tests/conftest.py", "tests/unit/conftest.py"])
    def test_fast_folders_load_no_airflow_harness(self, conftest: str) -> None:
        """Only tests/system/conftest.py registers the real-Airflow fixtures."""
        path = ROOT / conftest
        assert path.exists(), f"{conftest} is missing"
        assert imported_modules(path, ROOT) & HARNESSES == set()
        assert imported_modules(ROOT / "tests/system/conftest.py", ROOT) & HARNESSES == HARNESSES


class TestArchitectureMap:
    def test_map_names_every_module_and_no_other(self) -> None:
        """docs/architecture.md's "Where things are" lists exactly the production modules."""
        modules = {
            str(path.relative_to(ROOT))
            for package in PACKAGES
            for path in python_files(ROOT, package)
        }
        mapped = mapped_modules((ROOT / "docs/architecture.md").read_text(encoding="utf-8"))
        assert {"missing from the map": sorted(modules - mapped)} == {"missing from the map": []}
        assert {"mapped, not a module": sorted(mapped - modules)} == {"mapped, not a module": []}
