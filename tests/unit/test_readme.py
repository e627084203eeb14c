"""The README is a front page: the two commands first, and links into the manual that
resolve (mkdocs' strict build checks the manual's links, not the README's)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_the_first_block_is_the_two_commands() -> None:
    """Right after the first paragraph, a fenced block of `make up` and `make test`."""
    first_block = README.split("```\n", 2)[1]
    assert first_block == "make up\nmake test\n"
    before = README.split("```\n", 1)[0]
    assert before.count("\n\n") == 2, "title, one paragraph, then the commands"


def test_relative_links_point_at_files() -> None:
    """Every relative link of the README names a file of the repository."""
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    relative = [t for t in targets if "://" not in t]
    assert relative, "the README links into the manual"
    missing = [t for t in relative if not (ROOT / t).is_file()]
    assert missing == []


def test_it_links_every_page_of_the_manual() -> None:
    """Each page of docs/ is one click from the front page."""
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} - {"docs/index.md"}
    linked = set(re.findall(r"\]\((docs/[^)#]+)", README))
    assert sorted(pages - linked) == []
