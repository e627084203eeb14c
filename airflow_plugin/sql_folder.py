"""Read a folder tree of SQL files into tasks, groups and table dependencies (no Airflow).

Each top-level ``.sql`` file is a task; each sub-folder a group whose files run in name
order; names starting with ``__`` are left out. What a statement creates, inserts,
merges, updates or deletes is written; every other table it names (CTEs aside) is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fivetran_events.exceptions import SqlFolderError

from .extras import missing_extra

try:
    import sqlglot
    from sqlglot import exp
except ModuleNotFoundError as exc:
    raise missing_extra("sql", "The DAG factory", exc.name or "sqlglot") from None

# fmt: off
_WRITE_KINDS = (
    exp.Create, exp.Insert, exp.Merge, exp.Update, exp.Delete, exp.TruncateTable, exp.Drop,
    exp.Alter,
)
#: What may stand as a statement: sqlglot reads a typo (``SELEC * FRM``) as a multiplication,
#: refused here rather than in the warehouse at run time. ``Command``, sqlglot's fallback for
#: dialect statements it does not model (CALL, VACUUM), is accepted, with no tables.
_STATEMENT_NAMES = (
    "Query", "Create", "Insert", "Merge", "Update", "Delete", "Drop", "Alter", "TruncateTable",
    "Copy", "Grant", "Revoke", "Set", "Use", "Transaction", "Commit", "Rollback", "Analyze",
    "Command", "Describe", "Pragma", "Comment", "Cache", "Uncache", "Refresh", "LoadData",
    "Show", "Execute", "Declare",
)
# fmt: on
_STATEMENTS = tuple(k for k in (getattr(exp, n, None) for n in _STATEMENT_NAMES) if k is not None)
_ID_SAFE = re.compile(r"[^A-Za-z0-9_\-.]")


@dataclass(frozen=True)
class SqlTask:
    """One SQL file."""

    path: Path
    task_id: str
    sql: str
    reads: frozenset[str]
    writes: frozenset[str]


@dataclass(frozen=True)
class SqlGroup:
    """A top-level file (one task) or a sub-folder (tasks in file-name order)."""

    group_id: str
    tasks: tuple[SqlTask, ...]

    @property
    def writes(self) -> frozenset[str]:
        return frozenset().union(*(t.writes for t in self.tasks))

    @property
    def reads(self) -> frozenset[str]:
        """Tables read from outside the group (not written by an earlier task of it)."""
        written: set[str] = set()
        outside: set[str] = set()
        for t in self.tasks:
            outside |= {r for r in t.reads if r not in written and _bare(r) not in written}
            written |= t.writes | {_bare(w) for w in t.writes}
        return frozenset(outside)


@dataclass(frozen=True)
class SqlFolder:
    root: Path
    groups: tuple[SqlGroup, ...]


@dataclass
class Resolution:
    """What each group depends on: Fivetran connectors, other groups, and what is unknown."""

    connectors: dict[str, set[str]] = field(default_factory=dict)
    upstream_groups: dict[str, set[str]] = field(default_factory=dict)
    unknown: list[tuple[Path, str]] = field(default_factory=list)


def _bare(table: str) -> str:
    return table.rsplit(".", 1)[-1]


def _name(table: exp.Table) -> str:
    parts = [p for p in (table.catalog, table.db, table.name) if p]
    return ".".join(parts).lower()


def _written_table(stmt: exp.Expression) -> exp.Table | None:
    if isinstance(stmt, exp.TruncateTable):
        return next((e for e in stmt.expressions if isinstance(e, exp.Table)), None)
    target = stmt.this
    if isinstance(target, exp.Schema):  # CREATE TABLE t (cols ...)
        target = target.this
    return target if isinstance(target, exp.Table) else None


_JINJA_COMMENT = re.compile(r"\{#.*?#\}", re.S)
_JINJA_TAG = re.compile(r"\{%-?.*?-?%\}", re.S)
_JINJA_EXPR = re.compile(r"\{\{.*?\}\}", re.S)


def strip_jinja(sql: str) -> str:
    """Make templated SQL parseable: drop tags and comments, keep every branch's SQL (so
    ``{% if full_refresh %} TRUNCATE TABLE t; {% endif %}`` still writes ``t``); an
    expression becomes a placeholder name."""
    sql = _JINJA_COMMENT.sub(" ", sql)
    sql = _JINJA_TAG.sub(" ", sql)
    return _JINJA_EXPR.sub("__jinja__", sql)


def tables_of(sql: str, dialect: str | None = None) -> tuple[frozenset[str], frozenset[str]]:
    """Return (reads, writes) of a SQL script; raise sqlglot's ParseError on bad SQL."""
    reads: set[str] = set()
    writes: set[str] = set()
    for stmt in sqlglot.parse(strip_jinja(sql), read=dialect):
        if stmt is None:
            continue
        if not isinstance(stmt, _STATEMENTS):
            raise sqlglot.errors.ParseError(f"not a SQL statement: {stmt.sql()[:80]!r}")
        ctes = {c.alias_or_name.lower() for c in stmt.find_all(exp.CTE)}
        target = _written_table(stmt) if isinstance(stmt, _WRITE_KINDS) else None
        if target is not None:
            writes.add(_name(target))
        for table in stmt.find_all(exp.Table):
            if table is target or not table.name:
                continue
            name = _name(table)
            if name not in ctes:
                reads.add(name)
    # A script that creates a table and then reads it does not depend on anyone for it.
    own = writes | {_bare(w) for w in writes}
    return frozenset(r for r in reads if r not in own), frozenset(writes)


def _task(path: Path, task_id: str, dialect: str | None) -> SqlTask:
    try:
        sql = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SqlFolderError(path, f"cannot read the file: {exc}") from None
    if not sql.strip():
        raise SqlFolderError(path, "the file is empty")
    try:
        reads, writes = tables_of(sql, dialect)
    except sqlglot.errors.SqlglotError as exc:
        first = str(exc).splitlines()[0]
        raise SqlFolderError(path, f"the SQL does not parse: {first}") from None
    return SqlTask(path=path, task_id=task_id, sql=sql, reads=reads, writes=writes)


def _id(name: str) -> str:
    return _ID_SAFE.sub("_", name)


def _visible(p: Path) -> bool:
    return not p.name.startswith("__") and not p.name.startswith(".")


def scan_folder(root: Path | str, dialect: str | None = None) -> SqlFolder:
    """Read ``root`` into groups of tasks; raise SqlFolderError naming the bad file."""
    root = Path(root)
    if not root.is_dir():
        raise SqlFolderError(root, "is not a folder")
    groups: list[SqlGroup] = []
    for entry in sorted(filter(_visible, root.iterdir())):
        if entry.is_file() and entry.suffix == ".sql":
            groups.append(SqlGroup(_id(entry.stem), (_task(entry, _id(entry.stem), dialect),)))
        elif entry.is_dir():
            nested = [p for p in entry.iterdir() if _visible(p) and p.is_dir()]
            if nested:
                raise SqlFolderError(
                    nested[0],
                    "folders inside a group folder are not "
                    "supported (rename it to start with '__' to leave it out)",
                )
            files = sorted(p for p in entry.iterdir() if _visible(p) and p.suffix == ".sql")
            if files:
                tasks = tuple(_task(p, _id(p.stem), dialect) for p in files)
                groups.append(SqlGroup(_id(entry.name), tasks))
    if not groups:
        raise SqlFolderError(root, "holds no .sql files")
    return SqlFolder(root=root, groups=tuple(groups))


def resolve(
    folder: SqlFolder, schema_to_connector: Mapping[str, str], external: Iterable[str] = ()
) -> Resolution:
    """Tie each group's reads to Fivetran connectors and to the groups that write them;
    ``external`` lists tables (``schema.table``) or schemas (``schema.*``) produced elsewhere,
    anything else unknown is reported with the file that reads it."""
    schemas = {k.lower(): v for k, v in schema_to_connector.items()}
    ext = {e.lower() for e in external}
    writers: dict[str, str] = {}
    for g in folder.groups:
        for w in g.writes:
            writers[w] = g.group_id
            writers.setdefault(_bare(w), g.group_id)
    res = Resolution()
    for g in folder.groups:
        res.connectors[g.group_id] = set()
        res.upstream_groups[g.group_id] = set()
        for table in sorted(g.reads):
            schema = table.rsplit(".", 2)[-2] if "." in table else None
            if schema is not None and schema in schemas:
                res.connectors[g.group_id].add(schemas[schema])
            elif table in writers:
                if writers[table] != g.group_id:
                    res.upstream_groups[g.group_id].add(writers[table])
            elif table in ext or (schema is not None and f"{schema}.*" in ext):
                continue
            else:
                reader = next(t.path for t in g.tasks if table in t.reads)
                res.unknown.append((reader, table))
    return res
