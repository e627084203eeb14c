"""Build Airflow DAGs from a folder of SQL files: add a pipeline by adding a ``.sql`` file.

``dags_from_folder("sql/sales")`` in a DAG file turns the folder into a DAG (``dag.toml``
configures it: docs/dag-factory.md). A group depends on the connectors whose schemas it
reads and on the groups writing what it reads; anything else must be listed in ``external``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from fivetran_events.destinations import DestinationTable, destination_tables
from fivetran_events.exceptions import SqlFolderError
from fivetran_events.timeutil import parse_iso
from fivetran_events.uris import dataset_uri

from .extras import require_extra
from .sql_folder import SqlFolder, SqlGroup, SqlTask, resolve, scan_folder

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# Checked at import, where a DAG file's `from airflow_plugin.dag_factory import ...` shows
# it as the DAG's import error, rather than at the first SQL task.
require_extra("sql", "The DAG factory")

log = logging.getLogger(__name__)

CONFIG_FILE = "dag.toml"
ASSETS = "assets"
DEFAULT_OUTPUT_URI = "sql://{conn_id}/{table}"


@dataclass
class FolderConfig:
    """How one SQL folder becomes a DAG (``dag.toml``, then keyword overrides)."""

    dag_id: str
    conn_id: str = "warehouse"
    schedule: str | None = ASSETS
    assets: str = "all"
    start_date: datetime = field(default_factory=lambda: parse_iso("2026-01-01T00:00:00Z"))
    catchup: bool = False
    dialect: str | None = None
    external: list[str] = field(default_factory=list)
    upstream: list[str] = field(default_factory=list)
    output_uri: str = DEFAULT_OUTPUT_URI
    session_sql: list[str] = field(default_factory=list)
    connectors: dict[str, str] = field(default_factory=dict)
    connectors_from_history: bool = False
    redis_conn_id: str = "fivetran_events_redis"
    table_assets: bool | None = None
    reset_allowed: dict[str, bool] = field(default_factory=dict)
    sensor: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=lambda: ["fivetran-events", "sql"])
    default_args: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: Path, overrides: Mapping[str, Any]) -> FolderConfig:
        data: dict[str, Any] = {}
        path = folder / CONFIG_FILE
        if path.exists():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise SqlFolderError(path, f"is not valid TOML: {exc}") from None
        data.update(overrides)
        data.setdefault("dag_id", folder.name)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise SqlFolderError(
                path, f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        if isinstance(data.get("start_date"), str):
            try:
                data["start_date"] = parse_iso(data["start_date"])
            except ValueError as exc:
                raise SqlFolderError(path, f"start_date: {exc}") from None
        elif isinstance(data.get("start_date"), datetime):
            data["start_date"] = parse_iso(data["start_date"].isoformat())
        for table, kind in (("connectors", str), ("reset_allowed", bool)):
            for key, value in dict(data.get(table) or {}).items():
                if not isinstance(value, kind):
                    raise SqlFolderError(
                        path, f"{table}.{key} must be a {kind.__name__}, not {value!r}"
                    )
        cfg = cls(**data)
        if cfg.assets not in ("all", "any"):
            raise SqlFolderError(path, f"assets must be 'all' or 'any', not {cfg.assets!r}")
        return cfg

    def reset_allowed_for(self, tables: frozenset[str]) -> bool:
        """Whether a full refresh may rewrite every one of ``tables``."""
        default = self.reset_allowed.get("*", True)
        return all(self.reset_allowed.get(t, default) for t in tables)


def recorded_schemas(redis_conn_id: str = "fivetran_events_redis") -> dict[str, str]:
    """Map each recorded connector's name, which Fivetran gives its schema, to its id."""
    from .hooks import FivetranEventsRedisHook

    rows = FivetranEventsRedisHook(redis_conn_id).reader().connectors()
    return {
        str(r["connector_name"]).lower(): r["connector_id"] for r in rows if r.get("connector_name")
    }


def use_table_assets(cfg: FolderConfig) -> bool:
    """Whether to schedule on table assets: the folder says, or the granularity does."""
    if cfg.table_assets is not None:
        return cfg.table_assets
    from fivetran_events.settings import history_defaults

    return history_defaults().asset_granularity in ("table", "both")


def cached_tables(
    connectors: list[str], redis_conn_id: str = "fivetran_events_redis"
) -> dict[str, list[DestinationTable]]:
    """Each connector's cached destination tables (those with none cached are left out)."""
    from .hooks import FivetranEventsRedisHook

    hook = FivetranEventsRedisHook(redis_conn_id)
    out = {}
    for cid in connectors:
        found = destination_tables(hook.get_conn(), hook.config.key_prefix, cid)
        if found:
            out[cid] = found
    return out


def read_tables(
    sql: SqlFolder, schemas: Mapping[str, str], tables: Mapping[str, list[DestinationTable]]
) -> tuple[list[str], set[str]]:
    """Return the table URIs ``sql`` reads and the connectors it reads outside them."""
    schemas = {k.lower(): v for k, v in schemas.items()}
    named = {
        cid: {(t.schema.lower(), t.table.lower()): t.uri for t in ts} for cid, ts in tables.items()
    }
    uris: set[str] = set()
    whole: set[str] = set()
    for group in sql.groups:
        for read in group.reads:
            parts = read.lower().split(".")
            if len(parts) < 2 or parts[-2] not in schemas:
                continue
            cid = schemas[parts[-2]]
            uri = named.get(cid, {}).get((parts[-2], parts[-1]))
            if uri is None:
                whole.add(cid)
            else:
                uris.add(uri)
    return sorted(uris), whole


def _caller_dir(depth: int = 2) -> Path:
    """The folder of the DAG file ``depth`` frames up (``inspect.stack()`` reads every source)."""
    return Path(sys._getframe(depth).f_code.co_filename).resolve().parent


def _refuse_cycles(
    groups: tuple[SqlGroup, ...], upstream: Mapping[str, set[str]], folder: Path
) -> None:
    """Refuse a cycle between groups (A reads what B writes and B what A writes)."""
    state: dict[str, int] = {}

    def visit(g: str, path: list[str]) -> None:
        if state.get(g) == 2:
            return
        if state.get(g) == 1:
            cycle = " -> ".join([*path[path.index(g) :], g])
            raise SqlFolderError(folder, f"groups depend on each other in a cycle: {cycle}")
        state[g] = 1
        for u in sorted(upstream.get(g, ())):
            visit(u, [*path, g])
        state[g] = 2

    for group in groups:
        visit(group.group_id, [])


def build_dag(
    folder: str | Path,
    *,
    schema_to_connector: Mapping[str, str] | None = None,
    tables: Mapping[str, list[DestinationTable]] | None = None,
    **overrides: Any,
) -> Any:
    """Build one DAG from ``folder``; raise SqlFolderError (naming the file) on any problem."""
    from airflow.sdk import DAG, Asset, AssetAll, AssetAny, TaskGroup, chain

    from .operators.sql import FivetranSqlOperator

    root = Path(folder)
    if not root.is_absolute():
        root = _caller_dir() / root
    cfg = FolderConfig.load(root, overrides)
    recorded: dict[str, str] = {}
    if cfg.connectors_from_history:
        try:
            recorded = recorded_schemas(cfg.redis_conn_id)
        except Exception as exc:  # a DAG file must fail with a sentence, not a traceback
            raise SqlFolderError(
                root / CONFIG_FILE,
                "connectors_from_history: cannot read the recorded connectors through "
                f"connection '{cfg.redis_conn_id}': {exc}",
            ) from None
    mapping = {**recorded, **(schema_to_connector or {}), **cfg.connectors}
    sql: SqlFolder = scan_folder(root, cfg.dialect)
    res = resolve(sql, mapping, [*cfg.external, *cfg.upstream])
    if res.unknown:
        path, _ = res.unknown[0]
        unknown = ", ".join(sorted({t for _, t in res.unknown}))
        raise SqlFolderError(
            path,
            f"reads tables that no Fivetran connector, task or 'external' entry provides: "
            f"{unknown} (map the schema under [connectors] in {CONFIG_FILE}, or list it in "
            "'external')",
        )
    _refuse_cycles(sql.groups, res.upstream_groups, root)
    connectors = sorted(set().union(*res.connectors.values()))
    time_scheduled = cfg.schedule != ASSETS
    if not time_scheduled and not connectors and not cfg.upstream:
        raise SqlFolderError(
            root,
            "schedule = 'assets' but no file reads a Fivetran connector's schema: set a "
            "time schedule or map [connectors]",
        )

    def connector_asset(cid: str) -> Any:
        return Asset(uri=dataset_uri(cid))  # name = URI, as everywhere else

    def out_asset(table: str) -> Any:
        return Asset(uri=cfg.output_uri.format(conn_id=cfg.conn_id, table=table))

    if time_scheduled:
        schedule: Any = cfg.schedule
    else:
        # Another factory DAG's outlet has the same URI: this is how folders chain.
        assets = [connector_asset(c) for c in connectors]
        if use_table_assets(cfg):
            if tables is None:
                try:
                    tables = cached_tables(connectors, cfg.redis_conn_id)
                except Exception as exc:  # a DAG file must fail with a sentence
                    raise SqlFolderError(
                        root / CONFIG_FILE,
                        "table_assets: cannot read the connectors' tables through "
                        f"connection '{cfg.redis_conn_id}': {exc}",
                    ) from None
            table_uris, whole = read_tables(sql, mapping, tables)
            assets = [Asset(uri=u) for u in table_uris]
            assets += [connector_asset(c) for c in connectors if c in whole]
        assets += [out_asset(t.lower()) for t in cfg.upstream]
        schedule = AssetAll(*assets) if cfg.assets == "all" else AssetAny(*assets)

    def operator(task: SqlTask, group: SqlGroup, last: bool) -> Any:
        return FivetranSqlOperator(
            task_id=task.task_id,
            conn_id=cfg.conn_id,
            sql=task.sql,
            session_sql=cfg.session_sql,
            source_connectors=sorted(res.connectors[group.group_id]),
            reset_allowed=cfg.reset_allowed_for(group.writes),
            outlets=[out_asset(t) for t in sorted(group.writes)] if last else [],
            doc_md=f"`{task.path.relative_to(root)}`",
        )

    with DAG(
        dag_id=cfg.dag_id,
        schedule=schedule,
        start_date=cfg.start_date,
        catchup=cfg.catchup,
        tags=cfg.tags,
        default_args=cfg.default_args,
        doc_md=f"Built by fivetran-events' DAG factory from `{root}`.",
        render_template_as_native_obj=False,
    ) as dag:
        firsts: dict[str, Any] = {}
        lasts: dict[str, Any] = {}
        for group in sql.groups:
            if len(group.tasks) == 1 and group.tasks[0].path.parent == root:
                op = operator(group.tasks[0], group, last=True)
                firsts[group.group_id] = lasts[group.group_id] = op
                continue
            with TaskGroup(group_id=group.group_id):
                ops = [
                    operator(t, group, last=i == len(group.tasks) - 1)
                    for i, t in enumerate(group.tasks)
                ]
                chain(*ops)
            firsts[group.group_id], lasts[group.group_id] = ops[0], ops[-1]
        if time_scheduled:
            from .sensors import FivetranDateTimeSensor

            sensors = {
                c: FivetranDateTimeSensor(task_id=f"wait_for_{c}", connector_id=c, **cfg.sensor)
                for c in connectors
            }
            for gid, cids in res.connectors.items():
                for c in cids:
                    sensors[c] >> firsts[gid]
        for gid, ups in res.upstream_groups.items():
            for up in ups:
                lasts[up] >> firsts[gid]
    return dag


def dags_from_folder(folder: str | Path, **overrides: Any) -> Any:
    """Build the DAG of ``folder``, relative to the calling DAG file."""
    root = Path(folder)
    if not root.is_absolute():
        root = _caller_dir() / root
    return build_dag(root, **overrides)
