"""docs/architecture.md is a map: every file it names exists, so it cannot drift unseen."""

from __future__ import annotations

import re
from pathlib import Path

from testkit.imports import ROOT

DOC = ROOT / "docs" / "architecture.md"
#: A file named in backquotes: a path ending in one of the repository's file kinds.
NAMED = re.compile(r"`([A-Za-z0-9_./-]+\.(?:py|md|yml|yaml|sh|toml|json|html))`")
#: Where a bare name in the map's tables lives: the page names modules by their table's
#: package (``store.py`` under ``webhook_app/forwarding/``), so each package is a base.
TOP = ("fivetran_events", "webhook_app", "airflow_plugin", "testkit", "tests", "bench", "deploy")
FOLDERS = sorted(p for t in TOP for p in (ROOT / t).glob("**/") if "__pycache__" not in p.parts)
BASES = [ROOT, ROOT / "docs", *FOLDERS]


def missing(text: str, bases: list[Path]) -> list[str]:
    """Return the files ``text`` names that exist under none of ``bases``."""
    names = sorted(set(NAMED.findall(text)))
    assert names, "no file named: the pattern no longer matches the page"
    return [n for n in names if not any((b / n).exists() for b in bases)]


def test_every_file_the_architecture_names_exists() -> None:
    """A renamed or deleted module must take its row in docs/architecture.md with it."""
    assert missing(DOC.read_text(encoding="utf-8"), BASES) == []


def test_a_file_that_does_not_exist_is_caught() -> None:
    """The check sees a name that exists nowhere (it walked real folders, not none)."""
    text = "`webhook_app/forwarding/store.py` and `forwarding/_gone.py`"
    assert missing(text, BASES) == ["forwarding/_gone.py"]
