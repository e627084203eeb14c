"""No import cycles inside the project's packages, lazy imports in functions included.

A cycle makes the import order matter and hides which module owns what; a lazy import
inside a function only postpones it. The graph is read from the source with ``ast``,
module to module (a package's ``__init__`` counts as the package).
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fivetran_events", "webhook_app", "airflow_plugin")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Return the project modules that ``path`` (module ``name``) imports anywhere."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known else base)
    return {m for m in out if m in known and m != name}


def graph(package: str) -> dict[str, set[str]]:
    """Return each module of ``package`` with the project modules it imports."""
    files = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return {
        name: imports(path, name, set(files))
        for name, path in files.items()
        if name.split(".")[0] == package
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_itself_back(package: str) -> None:
    """A cycle found is named module by module, so the fix is plain."""
    try:
        TopologicalSorter(graph(package)).prepare()
    except CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")
