"""A real Airflow 3 for tests: its components on 127.0.0.1, started and stopped by PID.

Use it from any test module (it is registered in tests/system/conftest.py); what a test
asks of it (REST, database) is in testkit/airflow_api.py::

    def test_something(airflow3):              # session scope: one Airflow for the run
        token = airflow3.token()               # a JWT for the REST API
        airflow3.get("/api/v2/dags")           # requests.Response, authenticated
        airflow3.wait_for_dag("fivetran_consumer")
        airflow3.add_dag("my_dag.py", source)  # a DAG file of the test's own, parsed live

What it does: real components rather than ``airflow standalone``: ``airflow db migrate``,
then ``api-server --host 127.0.0.1`` on a free port, ``scheduler --skip-serve-logs``,
``dag-processor`` and ``triggerer --skip-serve-logs``; the metadata database on a
PostgreSQL server of its own (testkit/own_postgres.py: Debian's ``postgresql`` on a free
loopback port, started by ``prepare()`` and stopped last by ``stop()``), psycopg 3 for
both of Airflow's engines, as production runs it; LocalExecutor with
``AIRFLOW__CORE__PARALLELISM=2``; ``AIRFLOW_HOME`` in a temporary folder; the DAGs
folder a copy of ``testkit/airflow_dags`` (tests may add files to it); the simple auth
manager with a pre-written password file (user ``admin``); one JWT secret for all
components. Each component is started in a session of its own, and teardown signals
exactly those process groups (their own children included), never anything by name.

Tasks can report back through files: ``FTE_TEST_OUTPUT`` (``airflow.output_dir``) is
set in every component's environment. The session fixture also points the plugin's
default connection ``fivetran_events_redis`` at the suite's redis-server (key prefix
``test:``), so sensors in DAG files read the history the tests write, and logs at INFO
(the deferred sensor's trigger says in its log when and why it decided).

Startup takes about 10-40 s on 2 busy cores; ``FTE_AIRFLOW_START_TIMEOUT`` (seconds,
default 240) bounds it. Set ``FTE_AIRFLOW_KEEP_LOGS=1`` to print component logs when a
start fails (they are always printed then).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests
from pytest_redis.executor import RedisExecutor

from .airflow_api import USERNAME, AirflowApi
from .own_postgres import OwnPostgres, own_postgres
from .processes import free_port, poll_until, stop_group
from .support import conn_uri

T = TypeVar("T")

DAGS_SOURCE = Path(__file__).parent / "airflow_dags"
#: One more user per lesser role of the simple auth manager (viewer < user < op < admin),
#: so tests can show what each role may do (the worker's least role, deploy/compose.yaml).
ROLE_USERS = {"viewer": "fte-viewer", "user": "fte-user", "op": "fte-op"}
START_TIMEOUT = float(os.environ.get("FTE_AIRFLOW_START_TIMEOUT", "240"))
COMPONENTS = {
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the test process dies without its teardown (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def airflow_bin() -> str:
    """The ``airflow`` command of the interpreter running the tests."""
    here = Path(sys.executable).parent / "airflow"
    return str(here) if here.exists() else "airflow"


@dataclass
class AirflowServer(AirflowApi):
    """A running Airflow: its URL, credentials, folders and the processes it started."""

    home: Path
    port: int = field(default_factory=free_port)
    password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    jwt_secret: str = field(default_factory=lambda: secrets.token_urlsafe(64))
    #: Passwords of the ROLE_USERS, by username.
    role_passwords: dict[str, str] = field(
        default_factory=lambda: {name: secrets.token_urlsafe(16) for name in ROLE_USERS.values()}
    )
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    #: More environment for every component (connections, log level).
    extra_env: dict[str, str] = field(default_factory=dict)
    #: The triggerer's ``--capacity`` (None: Airflow's default, 1,000 triggers); a
    #: benchmark holding 1,000 deferred sensors raises it.
    triggerer_capacity: int | None = None
    #: The metadata database's server (``prepare()`` starts it, ``stop()`` ends it).
    postgres: OwnPostgres | None = None
    _token: str | None = None
    _database: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def output_dir(self) -> Path:
        return self.home / "output"

    @property
    def warehouse_dir(self) -> Path:
        """Where the SQLite 'warehouse' of connection ``warehouse`` lives (DAG factory)."""
        return self.home / "warehouse"

    def env(self) -> dict[str, str]:
        assert self.postgres is not None, "prepare() starts the database"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "2",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                # psycopg 3 for both engines: without the async URL Airflow derives one
                # for asyncpg, which is not installed.
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.postgres.url,
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": self.postgres.url,
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
                    [f"{USERNAME}:admin", *(f"{u}:{r}" for r, u in ROLE_USERS.items())]
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(
                    self.home / "passwords.json"
                ),
                "AIRFLOW__API_AUTH__JWT_SECRET": self.jwt_secret,
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API__BASE_URL": self.url,
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "3",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
                "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
                # Heartbeats of 1 s: a deferred sensor's release is timed in the tests, and
                # the scheduler and triggerer loops are most of it.
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
                "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "1",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
                "FTE_TEST_OUTPUT": str(self.output_dir),
                "AIRFLOW_CONN_WAREHOUSE": json.dumps(
                    {"conn_type": "sqlite", "host": str(self.warehouse_dir / "warehouse.db")}
                ),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    # --- lifecycle ---------------------------------------------------------------------

    def prepare(self) -> None:
        if self.postgres is None:
            self.postgres = self._database.enter_context(own_postgres())
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.warehouse_dir.mkdir(parents=True, exist_ok=True)
        for src in DAGS_SOURCE.glob("*.py"):
            shutil.copy(src, self.dags_folder / src.name)
        (self.home / "passwords.json").write_text(
            json.dumps({USERNAME: self.password, **self.role_passwords})
        )
        subprocess.run(
            [airflow_bin(), "db", "migrate"],
            env=self.env(),
            check=True,
            stdout=open(self.home / "migrate.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            timeout=START_TIMEOUT,
        )

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.home / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.procs[name] = subprocess.Popen(
            [airflow_bin(), *args],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()

    def _args(self, name: str) -> list[str]:
        args = list(COMPONENTS[name])
        if name == "triggerer" and self.triggerer_capacity is not None:
            args += ["--capacity", str(self.triggerer_capacity)]
        return args

    def start(self) -> None:
        """Start every component and wait until the API and the scheduler are healthy."""
        self.start_api(wait=False)
        for name in COMPONENTS:
            self._spawn(name, self._args(name))
        self.wait_healthy()

    def start_api(self, wait: bool = True) -> None:
        self._spawn("api-server", ["api-server", "--host", "127.0.0.1", "--port", str(self.port)])
        if wait:
            self.wait_healthy(components=("metadatabase",))

    def stop_api(self) -> None:
        """Stop the API server only (an outage as the webhook's worker sees it)."""
        self._stop("api-server")

    def _stop(self, name: str, timeout: float = 20.0) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            stop_group(proc, timeout)

    def stop(self) -> None:
        """Stop every component, then the database server."""
        for name in list(self.procs):
            self._stop(name)
        self._database.close()
        self.postgres = None

    def kill_triggerer(self) -> None:
        """SIGKILL the triggerer this harness started (its process group, by PID): a crash."""
        proc = self.procs.pop("triggerer", None)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)

    def stop_triggerer(self) -> None:
        """Stop the triggerer gracefully (SIGTERM): its triggers move at once to the next."""
        self._stop("triggerer")

    def start_triggerer(self) -> None:
        """Start a triggerer again (after ``kill_triggerer`` or ``stop_triggerer``)."""
        self._spawn("triggerer", self._args("triggerer"))

    def cpu_seconds(self, name: str) -> float:
        """User + system CPU seconds used so far by a component and its children.

        The triggerer is a supervisor and a trigger-runner child: their sum is what the
        machine pays for it. A child that exits takes its CPU time with it (psutil sees
        only live processes), so compare readings of one steady period.
        """
        import psutil

        root = psutil.Process(self.procs[name].pid)
        total = 0.0
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                t = proc.cpu_times()
                total += t.user + t.system
        return total

    def asset_state(self, key: str) -> list[Any]:
        """The values (JSON) stored under ``key`` in Airflow's asset state store."""
        return [
            json.loads(v)
            for (v,) in self.query("select value from asset_state_store where key=%s", key)
        ]

    def wait_healthy(
        self,
        timeout: float = START_TIMEOUT,
        components: tuple[str, ...] = ("metadatabase", "scheduler", "dag_processor", "triggerer"),
    ) -> None:
        last: list[Any] = [None]

        def healthy() -> bool:
            self._check_alive("starting")
            try:
                resp = requests.get(f"{self.url}/api/v2/monitor/health", timeout=5)
                last[0] = resp.json() if resp.status_code == 200 else resp.status_code
                return resp.status_code == 200 and all(
                    (last[0].get(c) or {}).get("status") == "healthy" for c in components
                )
            except (requests.RequestException, ValueError) as exc:
                last[0] = exc
                return False

        poll_until(
            healthy,
            "Airflow to be healthy",
            timeout,
            interval=0.5,
            details=lambda: f"(last: {last[0]})\n" + self.logs(),
        )

    def revive(self) -> list[str]:
        """Start again every component that exited by itself (not one a test stopped), and
        wait until Airflow is healthy; return their names. A test that crashed a component
        fails on its own; the tests after it get a whole Airflow, not its wreck."""
        dead = [name for name, proc in self.procs.items() if proc.poll() is not None]
        for name in dead:
            warnings.warn(
                f"Airflow {name} had exited with {self.procs[name].returncode}; "
                f"started again:\n{self.logs(name)}",
                stacklevel=2,
            )
            del self.procs[name]
            if name == "api-server":
                self.start_api(wait=False)
            else:
                self._spawn(name, self._args(name))
        if dead:
            self.wait_healthy()
        return dead

    def _check_alive(self, doing: str) -> None:
        """Fail at once, with its log, when a component exited (no wait can succeed)."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"Airflow {name} exited with {proc.returncode} while {doing}:\n"
                    + self.logs(name)
                )

    def logs(self, name: str | None = None, tail: int = 40) -> str:
        names = [name] if name else ["migrate", *self.procs]
        out = []
        for n in names:
            path = self.home / f"{n}.log"
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-tail:]
                out.append(f"--- {n}.log\n" + "\n".join(lines))
        return "\n".join(out)


@contextlib.contextmanager
def running(server: Any, home: Path) -> Iterator[None]:
    """Prepare and start a harness server; stop it and remove its home after.

    ``FTE_AIRFLOW_KEEP_HOME=1`` keeps the home (logs, database) for a look afterwards.
    """
    try:
        server.prepare()
        server.start()
        yield
    finally:
        server.stop()
        if not os.environ.get("FTE_AIRFLOW_KEEP_HOME"):
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow3(redis_proc: RedisExecutor) -> Iterator[AirflowServer]:
    """A real Airflow 3 for the whole test session (see the module docstring)."""
    home = Path(tempfile.mkdtemp(prefix="fte-airflow-"))
    redis_url = f"redis://{redis_proc.host}:{redis_proc.port}/0"
    server = AirflowServer(
        home=home,
        extra_env={
            "AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS": conn_uri(redis_url, "test:"),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        },
    )
    with running(server, home):
        yield server
