"""``fivetran-events import``: the LOG table's history, from an export or the database.

LOG rows are shaped as the Platform Connector writes them (``connection_id``, or the older
``connector_id``; ``message_data`` as JSON text; table events between a sync's start and
end), exported with each warehouse's column case, or in a real database: Debian's
PostgreSQL started for the module on a free loopback port (testkit/own_postgres.py), and
SQLite. Redis is the suite's; the webhook is the app, through signed deliveries.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from fivetran_events import Settings, __version__
from testkit.forward_support import syncs
from testkit.own_postgres import OwnPostgres, own_postgres
from testkit.support import PRIORITY_FIRST, deliver, payload
from testkit.worker_process import worker_env
from webhook_app.cli import importing, main
from webhook_app.forwarding.store import delivery_store

CONN = "rebuild_ogre"
COLUMNS = (
    "id",
    "time_stamp",
    "connection_id",
    "event",
    "message_event",
    "message_data",
    "sync_id",
    "transformation_id",
    "_fivetran_synced",
)
FIRST = datetime(2026, 11, 20, 6, 0)  # naive: UTC, as TIMESTAMP_NTZ


def sync_id(i: int) -> str:
    return f"3f2a1b0c-0000-4000-8000-{i:012d}"


def log_rows(n: int = 3, conn: str = CONN, first: datetime = FIRST) -> list[dict[str, Any]]:
    """``n`` syncs of ``conn`` an hour apart, as the LOG table holds them: start, table
    events, end (the last one fails), lower-case columns."""
    rows: list[dict[str, Any]] = []
    for i in range(n):
        start = first + timedelta(hours=i)
        failed = i == n - 1
        data = {"status": "FAILURE_WITH_TASK", "reason": "permission denied", "taskType": "x"}
        for j, (offset, kind, message) in enumerate(
            [
                (0, "sync_start", None),
                (60, "write_to_table_start", {"table": "orders"}),
                (
                    300,
                    "records_modified",
                    {"table": "orders", "count": 12, "operationType": "UPSERT"},
                ),
                (600, "sync_end", data if failed else {"status": "SUCCESSFUL"}),
            ]
        ):
            rows.append(
                {
                    "id": f"{conn}-{i}-{j}",
                    "time_stamp": start + timedelta(seconds=offset, microseconds=123456),
                    "connection_id": conn,
                    "event": "SEVERE" if failed and kind == "sync_end" else "INFO",
                    "message_event": kind,
                    "message_data": None if message is None else json.dumps(message),
                    "sync_id": sync_id(i),
                    "transformation_id": None,
                    "_fivetran_synced": start + timedelta(hours=1),
                }
            )
    return rows


def text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return str(value)


def write_jsonl(path: Path, rows: list[dict[str, Any]], upper: bool = False) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(
                json.dumps(
                    {
                        (k.upper() if upper else k): (text(v) if isinstance(v, datetime) else v)
                        for k, v in r.items()
                    }
                )
                + "\n"
            )
    return path


def write_csv(path: Path, rows: list[dict[str, Any]], upper: bool = True) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow([(c.upper() if upper else c) for c in rows[0]])
        for r in rows:
            w.writerow([text(v) for v in r.values()])
    return path


def cli(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def summary(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    return worker_env(settings)


@pytest.fixture(scope="module")
def postgres() -> Iterator[OwnPostgres]:
    with own_postgres() as pg:
        yield pg


def load_postgres(pg: OwnPostgres, schema: str, rows: list[dict[str, Any]], column: str) -> None:
    """A LOG table as the Platform Connector creates it, ``column`` naming the connector."""
    pg.execute(
        f"DROP SCHEMA IF EXISTS {schema} CASCADE",
        f"CREATE SCHEMA {schema}",
        f"CREATE TABLE {schema}.log (id text PRIMARY KEY, time_stamp timestamp, {column} text, "
        "event text, message_event text, message_data text, sync_id text, "
        "transformation_id text, _fivetran_synced timestamptz)",
    )
    import psycopg

    with (
        psycopg.connect(host="127.0.0.1", port=pg.port, user="postgres", dbname="postgres") as c,
        c.cursor() as cur,
    ):
        cur.executemany(
            f"INSERT INTO {schema}.log VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (*list(r.values())[:-1], r["_fivetran_synced"].replace(tzinfo=timezone.utc))
                for r in rows
            ],
        )


class TestFromAnExport:
    def test_json_lines_records_every_sync_marked_imported(
        self, env: dict[str, str], tmp_path: Path
    ) -> None:
        path = write_jsonl(tmp_path / "log.jsonl", log_rows(3))
        result = cli(env, "import", "--from", str(path))
        assert result.exit_code == 0, result.output
        assert "rows read      12" in result.output
        assert "recorded       6 (2 successes: not forwarded, see --forward)" in result.output
        assert "already known  0" in result.output
        assert "6  not a sync event" in result.output
        shown = cli(env, "history", CONN)
        lines = shown.output.splitlines()
        assert sum("(imported)" in line for line in lines) == 3, shown.output
        assert "FAILURE_WITH_TASK" in lines[1] and "permission denied" in lines[1]
        body = json.loads(cli(env, "history", CONN, "--json").output)
        assert {s["source"] for s in body["syncs"]} == {"imported"}
        assert body["syncs"][-1]["started_at"] == "2026-11-20T06:00:00.123Z"

    def test_csv_in_snowflakes_case_with_since_and_connector(
        self, env: dict[str, str], tmp_path: Path
    ) -> None:
        rows = log_rows(3) + log_rows(2, conn="other_conn")
        path = write_csv(tmp_path / "log.csv", rows)
        body = summary(
            cli(
                env,
                "import",
                "--from",
                str(path),
                "--json",
                "--connector",
                CONN,
                "--since",
                "2026-11-20T07:00:00Z",
            )
        )
        assert body["recorded"] == 4 and body["already_known"] == 0
        assert body["skipped"]["another connector (--connector)"] == 4  # its sync events
        assert body["skipped"]["before --since"] == 2
        assert body["source"] == "imported" and body["forwarded"] is False
        assert "other_conn" not in cli(env, "connectors").output

    def test_twice_and_a_half_imported_file_change_nothing(
        self, env: dict[str, str], tmp_path: Path, client: redis.Redis
    ) -> None:
        rows = log_rows(4)
        half = write_jsonl(tmp_path / "half.jsonl", rows[:7])
        whole = write_jsonl(tmp_path / "log.jsonl", rows)
        # Cut inside the second sync: its start is in, its end is not.
        assert summary(cli(env, "import", "--from", str(half), "--json"))["recorded"] == 3
        body = summary(cli(env, "import", "--from", str(whole), "--json"))
        assert (body["recorded"], body["already_known"]) == (5, 3)
        before = {
            k: client.dump(k) for k in client.scan_iter("test:h:*") if not k.endswith(b":seen")
        }
        again = summary(cli(env, "import", "--from", str(whole), "--json"))
        assert (again["recorded"], again["already_known"]) == (0, 8)
        after = {
            k: client.dump(k) for k in client.scan_iter("test:h:*") if not k.endswith(b":seen")
        }
        assert after == before


class TestWithTheWebhook:
    def test_a_delivery_after_the_import_is_a_duplicate_and_forwards_nothing(
        self,
        env: dict[str, str],
        tmp_path: Path,
        http: Any,
        settings: Settings,
        client: redis.Redis,
    ) -> None:
        """The webhook's copy, dated 800 ms later than the LOG row: one record, imported."""
        rows = log_rows(1)
        summary(
            cli(env, "import", "--from", str(write_jsonl(tmp_path / "l.jsonl", rows)), "--json")
        )
        end = rows[-1]["time_stamp"].replace(tzinfo=timezone.utc) + timedelta(milliseconds=800)
        answer = deliver(
            http,
            payload(
                "sync_end",
                CONN,
                end,
                sync_id=sync_id(0),
                status="FAILURE_WITH_TASK",
                reason="permission denied",
                taskType="x",
            ),
        )
        assert answer["status"] == "duplicate"
        store = delivery_store(settings, client)
        assert store.for_syncs(CONN, [sync_id(0)]) == {sync_id(0): []}
        body = json.loads(cli(env, "history", CONN, "--json").output)
        assert [s.get("source") for s in body["syncs"]] == ["imported"]
        assert [s.get("source") for s in syncs(http, CONN)] == ["imported"]  # the read API

    def test_an_import_after_the_webhook_finds_it_known(
        self, env: dict[str, str], tmp_path: Path, http: Any
    ) -> None:
        rows = log_rows(2)
        for r in rows:
            if r["message_event"] in ("sync_start", "sync_end"):
                data = json.loads(r["message_data"] or "{}")
                # Fivetran's webhook, 300 ms before the LOG table's time.
                created = r["time_stamp"].replace(tzinfo=timezone.utc) - timedelta(milliseconds=300)
                deliver(
                    http,
                    payload(
                        r["message_event"],
                        CONN,
                        created,
                        sync_id=r["sync_id"],
                        status=data.get("status"),
                        **{k: v for k, v in data.items() if k != "status"},
                    ),
                )
        body = summary(
            cli(env, "import", "--from", str(write_jsonl(tmp_path / "l.jsonl", rows)), "--json")
        )
        assert (body["recorded"], body["already_known"]) == (0, 4)
        syncs = json.loads(cli(env, "history", CONN, "--json").output)["syncs"]
        assert [s.get("source") for s in syncs] == [None, None]
        assert syncs[-1]["started_at"] == "2026-11-20T05:59:59.823Z"  # the webhook's time

    def test_forward_creates_the_webhooks_deliveries_for_recorded_successes(
        self, env: dict[str, str], tmp_path: Path, settings: Settings, client: redis.Redis
    ) -> None:
        path = write_jsonl(tmp_path / "l.jsonl", log_rows(3))
        store = delivery_store(settings, client)
        body = summary(cli(env, "import", "--from", str(path), "--json", "--forward"))
        assert body["recorded_successes"] == 2 and body["forwarded"] is True
        found = store.for_syncs(CONN, [sync_id(i) for i in range(3)])
        assert [len(found[sync_id(i)]) for i in range(3)] == [1, 1, 0]  # the failure: none

    def test_without_forward_nothing_is_forwarded(
        self, env: dict[str, str], tmp_path: Path, settings: Settings, client: redis.Redis
    ) -> None:
        path = write_jsonl(tmp_path / "l.jsonl", log_rows(3))
        summary(cli(env, "import", "--from", str(path), "--json"))
        found = delivery_store(settings, client).for_syncs(CONN, [sync_id(i) for i in range(3)])
        assert all(v == [] for v in found.values())


class TestFromTheDatabase:
    @pytest.mark.parametrize("column", ["connection_id", "connector_id"])
    def test_postgresql(self, env: dict[str, str], postgres: OwnPostgres, column: str) -> None:
        """Newer tables name the connector connection_id, older ones connector_id."""
        rows = log_rows(3)
        if column == "connector_id":
            rows = [
                {("connector_id" if k == "connection_id" else k): v for k, v in r.items()}
                for r in rows
            ]
            rows[0] = {**rows[0], "connector_id": "My Connector"}  # the oldest rows: a name
        load_postgres(postgres, "fivetran_metadata", rows, column)
        body = summary(cli(env, "import", "--from-db", postgres.url, "--json"))
        if column == "connection_id":
            assert body == {**body, "rows": 6, "recorded": 6, "already_known": 0, "skipped": {}}
        else:
            assert body["recorded"] == 5
            assert body["skipped"] == {
                "connector id is not an id (old LOG rows hold the connector's name)": 1
            }
        again = summary(
            cli(
                env, "import", "--from-db", postgres.url, "--json", "--since", "2026-11-20T07:00:00"
            )
        )
        assert (again["rows"], again["recorded"], again["already_known"]) == (4, 0, 4)

    def test_postgresql_schema_option_and_errors(
        self, env: dict[str, str], postgres: OwnPostgres
    ) -> None:
        load_postgres(postgres, "platform", log_rows(1), "connection_id")
        assert (
            summary(
                cli(env, "import", "--from-db", postgres.url, "--schema", "platform", "--json")
            )["recorded"]
            == 2
        )
        missing = cli(env, "import", "--from-db", postgres.url, "--schema", "nowhere")
        assert missing.exit_code == 2
        assert missing.output.strip() == "Error: --from-db: no table nowhere.log (see --schema)"

    def test_sqlite(self, env: dict[str, str], tmp_path: Path) -> None:
        db = tmp_path / "warehouse.db"
        with sqlite3.connect(db) as c:
            c.execute(
                "CREATE TABLE log (ID TEXT, TIME_STAMP TIMESTAMP, CONNECTION_ID TEXT, EVENT TEXT, "
                "MESSAGE_EVENT TEXT, MESSAGE_DATA TEXT, SYNC_ID TEXT, TRANSFORMATION_ID TEXT, "
                "_FIVETRAN_SYNCED TIMESTAMP)"
            )
            c.executemany(
                "INSERT INTO log VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    tuple(text(v) if isinstance(v, datetime) else v for v in r.values())
                    for r in log_rows(2)
                ],
            )
        url = f"sqlite:///{db}"
        body = summary(cli(env, "import", "--from-db", url, "--schema", "main", "--json"))
        assert (body["rows"], body["recorded"]) == (4, 4)
        since = summary(
            cli(
                env,
                "import",
                "--from-db",
                url,
                "--schema",
                "main",
                "--json",
                "--since",
                "2026-11-20T06:30:00Z",
            )
        )
        assert (since["rows"], since["already_known"]) == (2, 2)


def older_table(pg: OwnPostgres) -> None:
    """A LOG table from before the rename (both connector columns, its older rows fill only
    connector_id) that kept older syncs' outcomes in ``status`` rows, as dbt_fivetran_log's
    seeds and connection_status model show them."""
    pg.execute(
        "DROP SCHEMA IF EXISTS fivetran_metadata CASCADE",
        "CREATE SCHEMA fivetran_metadata",
        "CREATE TABLE fivetran_metadata.log (id text PRIMARY KEY, time_stamp timestamp, "
        "connector_id text, connection_id text, event text, message_event text, "
        "message_data text, sync_id text, transformation_id text)",
    )
    ok, first = (
        '{"status":"SUCCESSFUL"}',
        json.dumps({"status": "RESCHEDULED", "reason": PRIORITY_FIRST}),
    )
    a, b, c = sync_id(1), sync_id(2), sync_id(3)
    rows = [  # id, time, connector_id, connection_id, event, message_event, data, sync, tr
        ("a1", "06:00", CONN, None, "INFO", "sync_start", None, a, None),
        ("a2", "06:10", CONN, None, "INFO", "sync_end", None, a, None),
        ("a3", "06:10:01", CONN, None, "INFO", "status", ok, a, None),
        ("t1", "06:20", CONN, None, "INFO", "status", ok, None, "tr_1"),
        ("b1", "07:00", CONN, None, "INFO", "sync_start", None, b, None),
        ("b2", "07:10", CONN, None, "WARNING", "status", first, b, None),
        ("b3", "07:11", CONN, None, "INFO", "sync_end", None, b, None),
        ("c1", "08:00", CONN, CONN, "INFO", "sync_start", None, c, None),
        ("c2", "08:10", CONN, CONN, "INFO", "sync_end", ok, c, None),
    ]
    values = ", ".join(
        "("
        + ", ".join(
            "NULL" if v is None else "'" + v.replace("'", "''") + "'"
            for v in (r[0], f"2026-11-20 {r[1]}", *r[2:])
        )
        + ")"
        for r in rows
    )
    pg.execute(f"INSERT INTO fivetran_metadata.log VALUES {values}")


def docs_query(name: str) -> str:
    """The export query docs/day-one.md gives for ``name`` (the PostgreSQL one's SELECT)."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "day-one.md").read_text()
    block = page.split(f"**{name}**", 1)[1]
    return block[block.index("SELECT") : block.index("ORDER BY time_stamp") + 19]


class TestOlderTables:
    """The LOG table in its older forms, in a real PostgreSQL."""

    #: The older syncs' outcomes come from their status rows, the newest from its sync_end.
    EXPECTED = ((sync_id(1), "SUCCESSFUL"), (sync_id(2), "RESCHEDULED"), (sync_id(3), "SUCCESSFUL"))

    def outcomes(self, env: dict[str, str]) -> list[tuple[str, str]]:
        body = json.loads(cli(env, "history", CONN, "--json").output)
        return sorted((s["sync_id"], s["status"]) for s in body["syncs"])

    def test_from_db_reads_connector_id_and_status_rows(
        self, env: dict[str, str], postgres: OwnPostgres
    ) -> None:
        older_table(postgres)
        body = summary(cli(env, "import", "--from-db", postgres.url, "--json"))
        assert (body["rows"], body["recorded"], body["recorded_successes"]) == (9, 6, 2)
        assert body["skipped"] == {
            "no data.status (older tables keep it in a status row)": 2,
            "a transformation's status row": 1,
        }
        assert self.outcomes(env) == list(self.EXPECTED)

    def test_the_docs_export_query_reads_it_too(
        self, env: dict[str, str], postgres: OwnPostgres, tmp_path: Path
    ) -> None:
        older_table(postgres)
        import psycopg

        path = tmp_path / "log.csv"
        with (
            psycopg.connect(host="127.0.0.1", port=postgres.port, user="postgres") as c,
            c.cursor().copy(
                f"COPY ({docs_query('PostgreSQL')}) TO STDOUT WITH (FORMAT csv, HEADER)"
            ) as copy,
        ):
            path.write_bytes(b"".join(bytes(chunk) for chunk in copy))
        body = summary(cli(env, "import", "--from", str(path), "--json"))
        assert (body["rows"], body["recorded"], body["recorded_successes"]) == (8, 6, 2)
        assert self.outcomes(env) == list(self.EXPECTED)


class TestBadInput:
    @pytest.mark.parametrize(
        ("args", "message"),
        [
            ((), "give one of --from FILE or --from-db URL"),
            (("--from", "x", "--from-db", "sqlite://"), "give one of --from FILE or --from-db URL"),
            (("--from", "{f}", "--since", "last week"), "--since"),
            (("--from", "{f}", "--connector", "a b"), "is not a connector id"),
            (("--from", "{missing}"), "cannot read"),
            (("--from", "{nocol}"), "has no column time_stamp"),
            (("--from-db", "nope://x"), "--from-db: cannot use the URL"),
            (("--from", "{f}", "--db-password-file", "{f}"), "goes with --from-db"),
            (("--from-db", "sqlite://", "--db-password-file", "{missing}"), "cannot read"),
        ],
    )
    def test_a_clear_error_and_nothing_written(
        self,
        env: dict[str, str],
        tmp_path: Path,
        client: redis.Redis,
        args: tuple[str, ...],
        message: str,
    ) -> None:
        good = write_jsonl(tmp_path / "l.jsonl", log_rows(1))
        nocol = tmp_path / "nocol.csv"
        nocol.write_text("connection_id,message_event\nx,sync_end\n")
        filled = [a.format(f=good, missing=tmp_path / "missing.csv", nocol=nocol) for a in args]
        result = cli(env, "import", *filled)
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1
        assert list(client.scan_iter("test:*")) == []

    def test_forward_without_airflow(self, settings: Settings, tmp_path: Path) -> None:
        env = worker_env(settings)
        env.pop("FIVETRAN_EVENTS_AIRFLOW_URL")
        result = cli(
            env,
            "import",
            "--from",
            str(write_jsonl(tmp_path / "l.jsonl", log_rows(1))),
            "--forward",
        )
        assert result.exit_code == 2 and "needs FIVETRAN_EVENTS_AIRFLOW_URL" in result.output

    def test_from_db_without_the_extra(
        self, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "sqlalchemy", None)  # import sqlalchemy fails
        result = cli(env, "import", "--from-db", "postgresql+psycopg://127.0.0.1/x")
        assert result.exit_code == 2
        assert f"fivetran_events-{__version__}-py3-none-any.whl[import]" in result.output


class TestDatabasePassword:
    """The database's password comes from the environment or a file, never from argv
    (every user of the machine reads a process's arguments)."""

    def test_a_password_in_the_url_is_refused_unechoed(
        self, env: dict[str, str], client: redis.Redis
    ) -> None:
        url = "postgresql+psycopg://reader:hunter2-in-argv@127.0.0.1:1/x"
        result = cli(env, "import", "--from-db", url)
        assert result.exit_code == 2, result.output
        assert "FIVETRAN_EVENTS_IMPORT_DB_PASSWORD" in result.output
        assert "--db-password-file" in result.output and "hunter2" not in result.output
        assert list(client.scan_iter("test:*")) == []

    @pytest.mark.parametrize("given", ["file", "environment"])
    def test_from_a_file_or_the_environment(
        self, env: dict[str, str], postgres: OwnPostgres, tmp_path: Path, given: str
    ) -> None:
        """A URL without a password still works, the password given beside it."""
        load_postgres(postgres, "fivetran_metadata", log_rows(2), "connection_id")
        args = ["import", "--from-db", postgres.url, "--json"]
        if given == "file":
            secret = tmp_path / "db-password"
            secret.write_text("the-password\n")
            args += ["--db-password-file", str(secret)]
        else:
            env = {**env, "FIVETRAN_EVENTS_IMPORT_DB_PASSWORD": "the-password"}
        body = summary(cli(env, *args))
        assert (body["rows"], body["recorded"]) == (4, 4)


class TestProgress:
    def test_progress_without_a_terminal_prints_lines_on_stderr(
        self, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(importing, "PROGRESS_EVERY", 4)
        path = write_jsonl(tmp_path / "l.jsonl", log_rows(3))
        result = cli(env, "import", "--from", str(path), "--progress", "--json")
        assert result.exit_code == 0
        assert "importing: " in result.stderr and "rows read" in result.stderr
        assert json.loads(result.stdout)["recorded"] == 6  # stdout: the summary alone
        quiet = cli(env, "import", "--from", str(path), "--json")
        assert quiet.stderr == ""
