"""Where the LOG table's rows come from: a CSV or JSON Lines export (``read_file``) or
the destination itself (``read_database``: SQLAlchemy, imported only then, so the core
never needs it). Either gives its rows as mappings and the ``Columns`` they were found
under; log_import.py turns them into events.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from .log_import import CONNECTOR_COLUMNS, SYNC_EVENTS, Columns, LogReadError, RowFilter

#: How CSV exports write a NULL: an empty cell, or ``\\N`` (Snowflake's unload default).
NULLS = frozenset({"", "\\N"})
#: Rows per fetch from the database.
FETCH_ROWS = 10_000


# -- Files -----------------------------------------------------------------------------


@dataclass
class FileRows:
    """The rows of a CSV or JSON Lines export, and how many bytes of it were read."""

    path: Path
    columns: Columns
    rows: Iterator[Mapping[str, Any]]
    size: int
    position: Callable[[], int]


def _lines(stream: IO[bytes], counter: list[int]) -> Iterator[str]:
    for raw in stream:
        counter[0] += len(raw)
        yield raw.decode("utf-8-sig" if counter[0] == len(raw) else "utf-8", "replace")


def read_file(path: Path) -> FileRows:
    """Open a LOG export: JSON Lines when its first character is ``{``, else CSV with a
    header row. Raise LogReadError naming what is wrong with it."""
    try:
        stream = path.open("rb")
        size = path.stat().st_size
    except OSError as exc:
        raise LogReadError(f"cannot read {path}: {exc.strerror or exc}") from None
    counter = [0]
    lines = _lines(stream, counter)
    first = next(lines, "")
    if not first.strip():
        stream.close()
        raise LogReadError(f"{path} is empty: nothing to import")
    if first.lstrip().startswith("{"):
        try:
            head = json.loads(first)
        except ValueError:
            stream.close()
            raise LogReadError(f"{path}: line 1 is not a JSON object") from None
        columns = Columns.of(head, str(path))
        rows: Iterator[Mapping[str, Any]] = _json_rows(first, lines, stream)
    else:
        reader = csv.reader(_chain(first, lines))
        header = next(reader)
        columns = Columns.of(header, str(path))
        rows = _csv_rows(header, reader, stream)
    return FileRows(path, columns, rows, size, lambda: counter[0])


def _chain(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest


def _json_rows(first: str, lines: Iterator[str], stream: IO[bytes]) -> Iterator[Mapping[str, Any]]:
    with stream:
        for line in _chain(first, lines):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                row = None
            yield row if isinstance(row, dict) else {}  # a bad line: no message_event


def _csv_rows(
    header: list[str], reader: Iterator[list[str]], stream: IO[bytes]
) -> Iterator[Mapping[str, Any]]:
    with stream:
        for values in reader:
            if values:
                yield {h: v for h, v in zip(header, values, strict=False) if v not in NULLS}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- The database ----------------------------------------------------------------------


@dataclass
class DatabaseRows:
    columns: Columns
    rows: Iterator[Mapping[str, Any]]
    count: int


def read_database(url: str, schema: str, keep: RowFilter) -> DatabaseRows:
    """Read the sync events of ``schema``'s LOG table, oldest first, through SQLAlchemy.

    Only ``sync_start``/``sync_end`` rows are read (at or after ``keep.since_ms``, of
    ``keep.connectors``): the table's other rows (a row per table written) are most of it.
    Raise LogReadError when SQLAlchemy is missing or the table cannot be read.
    """
    try:
        import sqlalchemy as sa
    except ImportError:
        raise LogReadError(
            "--from-db needs SQLAlchemy and the database's driver: "
            "pip install 'fivetran-events[import]' (PostgreSQL's driver is included)"
        ) from None
    try:
        engine = sa.create_engine(url)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise LogReadError(f"--from-db: cannot use the URL: {exc}") from None
    try:
        table = sa.Table("log", sa.MetaData(), schema=schema or None, autoload_with=engine)
        columns = Columns.of(table.columns.keys(), f"the table {schema}.log")
        col = {c: table.columns[name] for c, name in columns.names.items()}
        where: list[Any] = [col["message_event"].in_(SYNC_EVENTS)]
        if keep.since_ms is not None:
            stamp = col["time_stamp"]
            since = datetime.fromtimestamp(keep.since_ms / 1000, timezone.utc)
            if not getattr(stamp.type, "timezone", False):
                since = since.replace(tzinfo=None)  # a naive time_stamp is UTC
            where.append(stamp >= since)
        if keep.connectors:
            ids = [col[c].in_(list(keep.connectors)) for c in CONNECTOR_COLUMNS if c in col]
            where.append(sa.or_(*ids))
        conn = engine.connect()
        count = conn.execute(sa.select(sa.func.count()).select_from(table).where(*where))
        total = int(count.scalar_one())
        query = sa.select(*col.values()).where(*where).order_by(col["time_stamp"])
        result = conn.execution_options(stream_results=True, yield_per=FETCH_ROWS).execute(query)
    except sa.exc.NoSuchTableError:
        raise LogReadError(f"--from-db: no table {schema}.log (see --schema)") from None
    except sa.exc.SQLAlchemyError as exc:
        raise LogReadError(f"--from-db: cannot read {schema}.log: {_first_line(exc)}") from None

    def rows() -> Iterator[Mapping[str, Any]]:
        n = 0
        try:
            for row in result.mappings():
                yield dict(row)
                n += 1
        except sa.exc.SQLAlchemyError as exc:
            raise LogReadError(
                f"--from-db: reading {schema}.log stopped after {n} rows ({_first_line(exc)}); "
                "what was recorded stays, and running the import again is safe"
            ) from None
        finally:
            conn.close()
            engine.dispose()

    return DatabaseRows(columns, rows(), total)
