""".ci/audit.py says what the vulnerability check checked, and never calls a package it
could not look up clean."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "audit.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_audit", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_unreachable_lookups_are_named_not_counted_as_checked() -> None:
    """pip-audit answers "No known vulnerabilities" when PyPI knows none of the packages;
    the summary says none was checked and why."""
    reason = "Dependency not found on PyPI and could not be audited"
    report = {
        "dependencies": [
            {"name": "flask", "skip_reason": f"{reason}: flask (3.1.3)"},
            {"name": "redis", "skip_reason": f"{reason}: redis (8.1.0)"},
        ]
    }
    lines, checked, vulns = load().summarize("pypi", "lock.txt", report)
    assert (checked, vulns) == (0, 0)
    assert (
        lines[0] == "lock.txt against pypi: checked 0 of 2 pinned packages, 0 known vulnerabilities"
    )
    assert (
        lines[1]
        == "  NOT CHECKED: 2 packages: Dependency not found on PyPI and could not be audited"
    )


def test_a_vulnerable_pin_is_named_with_its_fix() -> None:
    report = {
        "dependencies": [
            {
                "name": "requests",
                "version": "2.32.3",
                "vulns": [
                    {
                        "id": "GHSA-9hjg-9r4m-mvj7",
                        "fix_versions": ["2.32.4"],
                        "aliases": ["CVE-2024-47081"],
                    }
                ],
            },
            {"name": "flask", "version": "3.1.3", "vulns": []},
        ]
    }
    lines, checked, vulns = load().summarize("osv", "lock.txt", report)
    assert (checked, vulns) == (2, 1)
    assert lines[-1] == (
        "  VULNERABLE: requests 2.32.3: GHSA-9hjg-9r4m-mvj7 (CVE-2024-47081), fixed in 2.32.4"
    )
