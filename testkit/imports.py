"""The project's imports, read from the source with ``ast``: one walker for the layout tests.

``tests/unit/test_import_cycles.py`` builds the module graph from it and
``tests/unit/test_layout.py`` checks what the tests and benchmarks import. Every lookup
refuses a folder with no Python files: a check that walks nothing passes on any code.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

#: The checkout: the folder holding ``pyproject.toml``.
ROOT = Path(__file__).resolve().parents[1]
#: The import packages (pyproject.toml's ``packages.find``) and the code beside them.
SOURCE_FOLDERS = ("fivetran_events", "webhook_app", "airflow_plugin", "testkit", "bench")


def python_files(root: Path, folder: str) -> list[Path]:
    """Return ``folder``'s Python files; raise if there is none (a wrong root, a typo)."""
    files = sorted((root / folder).rglob("*.py"))
    if not files:
        raise FileNotFoundError(f"no Python files under {root / folder}")
    return files


def module_name(path: Path, root: Path) -> str:
    """Return the dotted name ``path`` imports as (a package's ``__init__``: the package)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _statements(path: Path, root: Path) -> Iterator[tuple[str, list[str]]]:
    """Yield each import of ``path`` (in functions too) as (module, names), relative resolved.

    ``import a.b`` gives ``("a.b", [])``, ``from ..a import b, c`` gives ``("pkg.a", ["b", "c"])``.
    """
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, [alias.name for alias in node.names]


def imported_modules(path: Path, root: Path) -> set[str]:
    """Every name ``path`` may import: ``from a import b`` gives both ``a`` and ``a.b``."""
    found: set[str] = set()
    for module, names in _statements(path, root):
        found.add(module)
        found.update(f"{module}.{n}" for n in names)
    return found


def project_imports(path: Path, root: Path, known: set[str]) -> set[str]:
    """Return the modules of ``known`` that ``path`` imports, itself left out.

    ``from a import b`` counts as importing ``a.b`` when that is a module, else ``a``.
    """
    found: set[str] = set()
    for module, names in _statements(path, root):
        if not names:
            found.add(module)
        for n in names:
            found.add(f"{module}.{n}" if f"{module}.{n}" in known else module)
    return (found & known) - {module_name(path, root)}


def import_graph(root: Path, folders: Iterable[str]) -> dict[str, set[str]]:
    """Return each module under ``folders`` with the modules of those folders it imports."""
    files = {module_name(p, root): p for folder in folders for p in python_files(root, folder)}
    known = set(files)
    return {name: project_imports(path, root, known) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """Return one import cycle of ``graph``, module by module (``[]`` when there is none)."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        return list(exc.args[1])
    return []
