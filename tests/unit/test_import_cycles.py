"""No import cycles in the project's code, lazy imports in functions included.

A cycle makes the import order matter and hides which module owns what; a lazy import
inside a function only postpones it. The graph is read from the source with ``ast``
(``testkit/imports.py``), module to module (a package's ``__init__`` counts as the
package), across the packages, ``testkit/`` and ``bench/`` at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.imports import ROOT, SOURCE_FOLDERS, find_cycle, import_graph

#: Fewer modules than this means the walk missed a folder (123 when this was written).
AT_LEAST = 100


class TestTheProject:
    def test_no_module_imports_itself_back(self) -> None:
        """A cycle found is named module by module, so the fix is plain."""
        cycle = find_cycle(import_graph(ROOT, SOURCE_FOLDERS))
        assert cycle == [], f"import cycle: {' -> '.join(cycle)}"

    def test_the_walk_reads_every_folder(self) -> None:
        """The check reads the real code: each folder's modules, and all of them together."""
        graph = import_graph(ROOT, SOURCE_FOLDERS)
        assert len(graph) > AT_LEAST
        assert {name.split(".")[0] for name in graph} == set(SOURCE_FOLDERS)
        assert any(graph.values()), "no module imports another: the walker reads nothing"


def _package(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


class TestTheWalker:
    def test_a_planted_cycle_is_found(self, tmp_path: Path) -> None:
        """A cycle through a relative, a lazy and an absolute import is reported, named."""
        _package(
            tmp_path,
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "from .b import thing\n",
                "pkg/b.py": "def thing():\n    from pkg.c import other\n",
                "pkg/c.py": "import pkg.a\nother = 1\n",
            },
        )
        cycle = find_cycle(import_graph(tmp_path, ["pkg"]))
        assert set(cycle) == {"pkg.a", "pkg.b", "pkg.c"}
        assert cycle[0] == cycle[-1]

    def test_a_package_importing_its_own_names_back_is_a_cycle(self, tmp_path: Path) -> None:
        """``from pkg import name`` in a module that ``pkg/__init__`` imports is one too."""
        _package(
            tmp_path,
            {"pkg/__init__.py": "from .a import f\n", "pkg/a.py": "from pkg import g\n"},
        )
        assert set(find_cycle(import_graph(tmp_path, ["pkg"]))) == {"pkg", "pkg.a"}

    def test_no_cycle_no_report(self, tmp_path: Path) -> None:
        """Imports in one direction only, a submodule named in ``from . import``: no cycle."""
        _package(
            tmp_path,
            {
                "pkg/__init__.py": "from . import a\n",
                "pkg/a.py": "from . import b\nimport os\n",
                "pkg/b.py": "",
            },
        )
        graph = import_graph(tmp_path, ["pkg"])
        assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": set()}
        assert find_cycle(graph) == []

    def test_a_folder_without_code_is_an_error(self, tmp_path: Path) -> None:
        """A wrong root or a typo in a folder name fails instead of checking nothing."""
        (tmp_path / "pkg").mkdir()
        with pytest.raises(FileNotFoundError, match="no Python files"):
            import_graph(tmp_path, ["pkg"])
        with pytest.raises(FileNotFoundError, match="no Python files"):
            import_graph(tmp_path, ["missing"])
