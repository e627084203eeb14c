"""A PostgreSQL server of a test's own (Debian's ``postgresql``), on a free loopback port.

``fivetran-events import --from-db`` reads the Platform Connector's LOG table from the
destination; its tests give it a real PostgreSQL holding such a table, and the test
Airflow (testkit/airflow_harness.py) keeps its metadata in one. PostgreSQL refuses to run
as root, and the suite runs as root in CI: then initdb and the server run as the
``postgres`` user that Debian's package creates (``nobody`` where there is none), through
setpriv, in a directory of their own under /tmp that this user owns. The server is
stopped by its PID (SIGINT: PostgreSQL's fast shutdown), its directory removed.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .processes import free_port, poll_until, stop_group

if TYPE_CHECKING:
    import psycopg


def unprivileged() -> pwd.struct_passwd:
    """The user the server runs as when the suite runs as root."""
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return pwd.getpwnam("nobody")


def postgres_bin() -> Path | None:
    """Debian's PostgreSQL binaries (the newest installed major version), or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    return Path(on_path).parent if on_path else None


def sqlalchemy_url(port: int, driver: str = "psycopg") -> str:
    """SQLAlchemy's URL of the ``postgres`` database of the server on ``port`` (trust login)."""
    return f"postgresql+{driver}://postgres@127.0.0.1:{port}/postgres"


@dataclass
class OwnPostgres:
    directory: Path
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        """SQLAlchemy's URL of the server's ``postgres`` database (trust login, loopback)."""
        return self.url_for("psycopg")

    def url_for(self, driver: str) -> str:
        """The same URL through another driver (Airflow 2's SQLAlchemy 1.4: ``psycopg2``)."""
        return sqlalchemy_url(self.port, driver)

    def connect(self, autocommit: bool = False) -> psycopg.Connection[tuple[Any, ...]]:
        """A psycopg connection to the ``postgres`` database (the import extra's driver)."""
        import psycopg

        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            dbname="postgres",
            autocommit=autocommit,
        )

    def execute(self, *statements: str) -> None:
        """Run SQL statements in one transaction."""
        with self.connect() as conn:
            for sql in statements:
                conn.execute(sql.encode())

    def rows(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        """The rows of one statement, ``%s`` placeholders for ``params``."""
        with self.connect(autocommit=True) as conn:
            return conn.execute(sql.encode(), params).fetchall()


def _as_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    user = unprivileged()
    return [
        "setpriv",
        f"--reuid={user.pw_uid}",
        f"--regid={user.pw_gid}",
        "--clear-groups",
        *argv,
    ]


@contextmanager
def own_postgres(port: int | None = None) -> Iterator[OwnPostgres]:
    """Run a fresh PostgreSQL for the block on ``port`` (else a free one) of 127.0.0.1; stop
    it by PID after."""
    bindir = postgres_bin()
    if bindir is None:
        raise RuntimeError(
            "PostgreSQL is not installed: deploy/ensure-test-tools.sh installs Debian's "
            "postgresql (make install)"
        )
    directory = Path(tempfile.mkdtemp(prefix="fte-postgres-"))
    try:
        if os.geteuid() == 0:
            user = unprivileged()
            os.chown(directory, user.pw_uid, user.pw_gid)
        data, log = directory / "data", directory / "postgres.log"
        subprocess.run(
            _as_user(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-sync",
                ]
            ),
            check=True,
            capture_output=True,
        )
        port = port or free_port()
        with (directory / "stdout.log").open("ab") as out:
            proc = subprocess.Popen(
                _as_user(
                    [
                        str(bindir / "postgres"),
                        "-D",
                        str(data),
                        "-p",
                        str(port),
                        "-c",
                        "listen_addresses=127.0.0.1",
                        "-c",
                        f"unix_socket_directories={directory}",
                        "-c",
                        "fsync=off",
                        "-c",
                        "synchronous_commit=off",
                        "-c",
                        "full_page_writes=off",
                        "-c",
                        "timezone=UTC",
                        "-c",
                        f"log_directory={directory}",
                        "-c",
                        f"log_filename={log.name}",
                        "-c",
                        "logging_collector=off",
                    ]
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = OwnPostgres(directory, port, proc)
        try:

            def answers() -> bool:
                assert proc.poll() is None, "postgres exited"
                try:
                    server.execute("SELECT 1")
                    return True
                except Exception:  # not accepting connections yet
                    return False

            poll_until(
                answers,
                f"PostgreSQL on port {port}",
                30,
                interval=0.1,
                details=lambda: (directory / "stdout.log").read_text(errors="replace")[-2000:],
            )
            yield server
        finally:
            stop_group(proc, timeout=20, sig=signal.SIGINT)  # fast shutdown
    finally:
        shutil.rmtree(directory, ignore_errors=True)
