"""The layout's rules, read from the source: what imports what, and where things are."""

from __future__ import annotations

import pytest

from testkit.imports import ROOT, imported_modules, python_files

HARNESSES = {"testkit.airflow_harness", "testkit.airflow2_harness"}


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


#: The packages that ship (pyproject.toml's ``packages.find``): the production code.
PRODUCTION = ("fivetran_events", "webhook_app", "airflow_plugin")
#: A module holds one concept; past this many lines it holds two (issue #38).
MODULE_LINES = 450
#: The production code's budget for this phase (issue #38): features may grow it, to at most this.
PRODUCTION_LINES = 16_500


def production_sizes() -> dict[str, int]:
    """Return each production module's line count, by its path from the checkout."""
    return {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for folder in PRODUCTION
        for path in python_files(ROOT, folder)
    }


class TestSizes:
    def test_no_production_module_is_over_its_limit(self) -> None:
        """A module past 450 lines is split by concern, not left to grow."""
        sizes = production_sizes()
        assert {p: n for p, n in sizes.items() if n > MODULE_LINES} == {}

    def test_the_production_code_stays_within_its_budget(self) -> None:
        """The three packages together stay within the phase's line budget."""
        total = sum(production_sizes().values())
        assert total <= PRODUCTION_LINES, f"{total} production lines, budget {PRODUCTION_LINES}"
