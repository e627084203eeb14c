"""Read Fivetran's Platform Connector LOG table into sync events, as the webhook would have.

Rows come from a CSV or JSON Lines export or the destination (SQLAlchemy, imported only
then); a row that is no sync's start or end is skipped with a reason.
"""

from __future__ import annotations

import contextlib
import csv
import json
import queue
import re
import threading
from collections import Counter
from collections.abc import Callable, Collection, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from itertools import chain
from pathlib import Path
from typing import IO, Any, TypeVar

import redis

from . import __version__
from .exceptions import InvalidPayload, LogReadError
from .history.writer import OnSuccess, WriteStatus, record_many
from .model import SOURCE_IMPORTED, Event, EventKind, derived_sync_id, event_data, is_valid_id
from .timeutil import from_ms, now_ms, to_ms, to_utc

T = TypeVar("T")
Rows = Iterator[Mapping[str, Any]]

#: The ``message_event`` values imported; older tables keep a sync's outcome in
#: ``status`` rows, read as github.com/fivetran/dbt_fivetran_log's
#: models/fivetran_platform__connection_status.sql does: SUCCESSFUL, or RESCHEDULED
#: "intended behavior" (a priority-first sync's end); a transformation's row is no sync's.
SYNC_EVENTS = ("sync_start", "sync_end", "status")
#: Lower-case names; one of CONNECTOR_COLUMNS is needed too.
REQUIRED_COLUMNS = ("time_stamp", "message_event")
OPTIONAL_COLUMNS = ("message_data", "sync_id", "transformation_id")
#: Newer tables say ``connection_id``; a table's rows from before the rename ``connector_id``.
CONNECTOR_COLUMNS = ("connection_id", "connector_id")
DEFAULT_SCHEMA = "fivetran_metadata"
#: How CSV exports write a NULL: an empty cell, or ``\\N`` (Snowflake's unload default).
NULLS = frozenset({"", "\\N"})
#: Rows per fetch from the database.
FETCH_ROWS = 10_000

#: A warehouse's way of writing a time: ``2026-01-02 03:04:05.123456`` (no zone: UTC),
#: with ``T``, ``Z``, ``UTC``, ``+00:00`` or ``+0000``; any number of fraction digits.
_TIME = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
    r"\s*(Z|UTC|[+-]\d\d:?\d\d)?",
    re.IGNORECASE,
)


def parse_time(value: Any) -> int:
    """Return epoch ms of a LOG ``time_stamp``: a datetime (naive is UTC) or its text."""
    if isinstance(value, datetime):
        return to_ms(value)
    m = _TIME.fullmatch(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise ValueError(f"time_stamp is not a time: {str(value)[:64]!r}")
    y, mo, d, h, mi, s, frac, zone = m.groups()
    tz = timezone.utc
    if zone and zone.upper() not in ("Z", "UTC"):
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    micro = int((frac or "0")[:6].ljust(6, "0"))
    try:
        when = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micro, tzinfo=tz)
    except ValueError:
        raise ValueError(f"time_stamp is not a time: {value[:64]!r}") from None
    return to_ms(to_utc(when))


def _message_data(value: Any) -> dict[str, Any]:
    """``message_data`` as a mapping: JSON text (as Fivetran writes it) or already decoded."""
    if value is None or value == "":
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, bytes | str):
        try:
            data = json.loads(value)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise ValueError("message_data is not JSON") from None
        if isinstance(data, dict):
            return data
    raise ValueError("message_data is not a JSON object")


@dataclass
class Columns:
    """Where each column is in the rows of one input (names matched whatever their case)."""

    names: dict[str, str]

    @classmethod
    def of(cls, header: Iterable[str], where: str) -> Columns:
        by_lower = {str(h).strip().lower(): str(h) for h in header}
        missing = [c for c in REQUIRED_COLUMNS if c not in by_lower]
        if not any(c in by_lower for c in CONNECTOR_COLUMNS):
            missing.append(" or ".join(CONNECTOR_COLUMNS))
        if missing:
            raise LogReadError(
                f"{where} has no column {', '.join(missing)}: export the LOG table's "
                "time_stamp, connection_id (or connector_id), message_event, message_data "
                "and sync_id (docs/day-one.md)"
            )
        wanted = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *CONNECTOR_COLUMNS)
        return cls({c: by_lower[c] for c in wanted if c in by_lower})

    def get(self, row: Mapping[str, Any], column: str) -> Any:
        name = self.names.get(column)
        return None if name is None else row.get(name)


@dataclass
class RowFilter:
    """What to import: rows at or after ``since_ms``, of ``connectors`` (all when empty)."""

    since_ms: int | None = None
    connectors: Collection[str] = ()


def row_event(row: Mapping[str, Any], columns: Columns, keep: RowFilter) -> Event | str:
    """Return the Event a LOG row stands for, or why it is skipped (a short phrase)."""
    kind = columns.get(row, "message_event")
    if kind not in SYNC_EVENTS:
        return "not a sync event"
    connector = columns.get(row, "connection_id") or columns.get(row, "connector_id")
    if not connector:
        return "no connection_id or connector_id"
    connector = str(connector)
    if keep.connectors and connector not in keep.connectors:
        return "another connector (--connector)"
    try:
        created = parse_time(columns.get(row, "time_stamp"))
        data = _message_data(columns.get(row, "message_data"))
    except ValueError as exc:
        return str(exc).split(":")[0]
    if keep.since_ms is not None and created < keep.since_ms:
        return "before --since"
    if kind == "status":  # older tables' outcome, read as dbt_fivetran_log reads it (above)
        if columns.get(row, "transformation_id") not in (None, ""):
            return "a transformation's status row"
        status, reason = data.get("status"), data.get("reason")
        priority_first = status == "RESCHEDULED" and "intended behavior" in str(reason)
        if status != "SUCCESSFUL" and not priority_first:
            return "a status row without a sync's outcome"
        kind = "sync_end"
    elif kind == "sync_end" and data.get("status") is None:
        return "no data.status (older tables keep it in a status row)"
    return sync_event(kind, str(connector), created, columns.get(row, "sync_id"), data)


def sync_event(
    kind: str, connector: str, created_ms: int, sync_id: Any, data: Mapping[str, Any]
) -> Event | str:
    """The Event ``model.parse_event`` makes of this sync event's webhook body, marked
    imported, or why it would refuse it ("invalid FIELD"); a test holds the two equal."""
    if not is_valid_id(connector):
        return "connector id is not an id (old LOG rows hold the connector's name)"
    if connector.startswith("_"):
        return "not a sync event"  # a sample's connector (_connector_1)
    if sync_id in (None, ""):
        sync_id = derived_sync_id(connector, created_ms)
    elif not isinstance(sync_id, str) or not is_valid_id(sync_id):
        return "invalid sync_id"
    try:
        got = event_data(EventKind(kind), data)
    except InvalidPayload as exc:
        return f"invalid {exc.field}"
    return Event(
        kind=EventKind(kind),
        event=kind,
        created=from_ms(created_ms),
        connector_id=connector,
        sync_id=sync_id,
        status=got.status,
        reason=got.reason,
        task_type=got.task_type,
        rescheduled_at_ms=got.rescheduled_at_ms,
        source=SOURCE_IMPORTED,
        dropped=got.dropped,
    )


@dataclass
class Summary:
    """What an import did, row by row: the CLI prints it, the bench reads it."""

    rows: int = 0
    recorded: int = 0
    known: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    #: Recorded successes, forwarded to Airflow with ``--forward``.
    successes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "recorded": self.recorded,
            "already_known": self.known,
            "recorded_successes": self.successes,
            "skipped": dict(self.skipped.most_common()),
        }


def events_of(
    rows: Iterable[Mapping[str, Any]], columns: Columns, keep: RowFilter, summary: Summary
) -> Iterator[Event]:
    """Yield the events of ``rows``, counting rows read and skipped. A sync's outcome in both
    its ``sync_end`` and ``status`` rows (a table written across the change) counts once."""
    last: dict[str, tuple[str | None, str | None, bool]] = {}  # per connector
    for row in rows:
        summary.rows += 1
        found = row_event(row, columns, keep)
        if not isinstance(found, str) and found.kind is EventKind.SYNC_END:
            from_status = columns.get(row, "message_event") == "status"
            if last.get(found.connector_id) == (found.sync_id, found.status, not from_status):
                found = "the outcome its sync_end or status row gave"
            else:
                last[found.connector_id] = (found.sync_id, found.status, from_status)
        if isinstance(found, str):
            summary.skipped[found] += 1
        else:
            yield found


def record_events(
    client: redis.Redis,
    prefix: str,
    retention_ms: int,
    events: Iterable[Event],
    summary: Summary,
    max_clock_skew_ms: int,
    on_success: OnSuccess | None = None,
    now: int | None = None,
) -> Summary:
    """Write ``events`` into the history, counting what became of each in ``summary``."""
    now = now_ms() if now is None else now

    def dated_now(stream: Iterable[Event]) -> Iterator[Event]:
        for event in stream:
            if event.created_ms - now > max_clock_skew_ms:
                summary.skipped["dated in the future"] += 1
            else:
                yield event

    results = record_many(
        client, prefix, prefetched(dated_now(events)), retention_ms, now=now, on_success=on_success
    )
    for event, status in results:
        if status is WriteStatus.RECORDED:
            summary.recorded += 1
            summary.successes += event.is_success
        elif status is WriteStatus.DUPLICATE:
            summary.known += 1
        else:
            summary.skipped["older than the history retention"] += 1
    return summary


def prefetched(items: Iterable[T], chunk: int = 2000, depth: int = 4) -> Generator[T, None, None]:
    """Yield ``items``, produced ``chunk`` at a time by a thread that reads and checks
    rows while the caller waits on Redis (the GIL is released on the socket)."""
    batches: queue.Queue[list[T] | BaseException | None] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: list[T] | BaseException | None) -> bool:
        while not stop.is_set():
            with contextlib.suppress(queue.Full):
                batches.put(item, timeout=0.1)
                return True
        return False

    def work() -> None:
        batch: list[T] = []
        try:
            for item in items:
                batch.append(item)
                if len(batch) >= chunk:
                    if not put(batch):
                        return
                    batch = []
            put(batch)
            put(None)
        except BaseException as exc:  # handed to the caller, raised there
            put(exc)

    thread = threading.Thread(target=work, name="log-import-reader", daemon=True)
    thread.start()
    try:
        while (got := batches.get()) is not None:
            if isinstance(got, BaseException):
                raise got
            yield from got
    finally:
        stop.set()
        thread.join()


@dataclass
class FileRows:
    """The rows of a CSV or JSON Lines export, and how many bytes of it were read."""

    path: Path
    columns: Columns
    rows: Rows
    size: int
    position: Callable[[], int]


def _lines(stream: IO[bytes], counter: list[int]) -> Iterator[str]:
    for raw in stream:
        counter[0] += len(raw)
        yield raw.decode("utf-8-sig" if counter[0] == len(raw) else "utf-8", "replace")


def read_file(path: Path) -> FileRows:
    """Open a LOG export: JSON Lines when it starts with ``{``, else CSV with a header."""
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
        rows: Rows = _json_rows(first, lines, stream)
    else:
        reader = csv.reader(chain([first], lines))
        header = next(reader)
        columns = Columns.of(header, str(path))
        rows = _csv_rows(header, reader, stream)
    return FileRows(path, columns, rows, size, lambda: counter[0])


def _json_rows(first: str, lines: Iterator[str], stream: IO[bytes]) -> Rows:
    with stream:
        for line in chain([first], lines):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                row = None
            yield row if isinstance(row, dict) else {}  # a bad line: no message_event


def _csv_rows(header: list[str], reader: Iterator[list[str]], stream: IO[bytes]) -> Rows:
    with stream:
        for values in reader:
            if values:
                yield {h: v for h, v in zip(header, values, strict=False) if v not in NULLS}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass
class DatabaseRows:
    columns: Columns
    rows: Rows
    count: int


def read_database(url: str, schema: str, keep: RowFilter) -> DatabaseRows:
    """Read the sync rows of ``schema``'s LOG table kept by ``keep``, oldest first (the
    filter runs in the database: a row per table written is most of the table)."""
    try:
        import sqlalchemy as sa
    except ImportError:
        raise LogReadError(
            "--from-db needs SQLAlchemy and the database's driver: "
            "install our wheel with its [import] extra, e.g. pip install "
            f"'dist/fivetran_events-{__version__}-py3-none-any.whl[import]' "
            "(PostgreSQL's driver is included; docs/install.md)"
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
            since = from_ms(keep.since_ms)
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

    def rows() -> Rows:
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
