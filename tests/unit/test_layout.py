"""The test layout's rules, read from the source: what imports what."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESSES = {"testkit.airflow_harness", "testkit.airflow2_harness"}

pytestmark = pytest.mark.unit


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved against its package."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


class TestImports:
    def test_no_test_module_imports_another(self) -> None:
        """Shared code lives in helpers (testkit/, a folder's helper module), never in a test."""
        offenders = {
            str(path.relative_to(ROOT)): sorted(
                m for m in imported_modules(path) if m.rsplit(".", 1)[-1].startswith("test_")
            )
            for path in python_files("tests")
        }
        assert {k: v for k, v in offenders.items() if v} == {}

    def test_benchmarks_do_not_import_tests(self) -> None:
        """bench/ uses testkit/, so moving or renaming a test never breaks a benchmark."""
        offenders = {
            str(path.relative_to(ROOT)): sorted(
                m for m in imported_modules(path) if m == "tests" or m.startswith("tests.")
            )
            for path in python_files("bench")
        }
        assert {k: v for k, v in offenders.items() if v} == {}

    @pytest.mark.parametrize("conftest", ["tests/conftest.py", "tests/unit/conftest.py"])
    def test_fast_folders_load_no_airflow_harness(self, conftest: str) -> None:
        """Only tests/system/conftest.py registers the real-Airflow fixtures."""
        path = ROOT / conftest
        assert path.exists(), f"{conftest} is missing"
        assert imported_modules(path) & HARNESSES == set()
        assert imported_modules(ROOT / "tests/system/conftest.py") & HARNESSES == HARNESSES
