"""A real Airflow 2.11 webserver for the Airflow 2 (``/api/v1``) path, on 127.0.0.1.

Airflow 2 cannot share a virtualenv with Airflow 3, so it lives in its own:
``FTE_AIRFLOW2_VENV`` (default ``<repo>/.venv-af2``, ignored by git). The session
fixture ``airflow2`` creates it when it is missing (``pip install apache-airflow==2.11.0``,
about a minute from a warm index, bounded by ``FTE_AIRFLOW2_INSTALL_TIMEOUT``, default
900 s). It also installs this project there (``pip install --no-deps -e <repo>`` plus the
core's runtime dependencies from ``pyproject.toml``, never the ``airflow`` extra, which
pins Airflow 3-era packages), so ``airflow_plugin`` and its ``airflow.plugins`` entry
point run on Airflow 2 (tests/system/airflow_plugin/test_airflow2.py). A venv made before that
step gets it once, without reinstalling Airflow. The fixture then runs: ``airflow db
migrate``, ``airflow users create`` (an Admin with a random password), ``airflow dags
reserialize`` over ``testkit/airflow2_dags`` (which registers their datasets), and
``airflow webserver --hostname 127.0.0.1`` on a free port with basic auth for the REST
API. Its metadata lives in a PostgreSQL of its own (testkit/own_postgres.py), as
production runs Airflow, reached through psycopg2: Airflow 2.11 runs on SQLAlchemy 1.4,
which has no psycopg 3 dialect. Only the webserver runs: posting and reading dataset events
needs nothing else. Teardown signals exactly the process group it started.

    def test_x(airflow2):        # airflow2.url, .username, .password, .reserialize()
        ...
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from .airflow_harness import _die_with_parent, running
from .own_postgres import OwnPostgres, own_postgres
from .processes import free_port, poll_until, stop_group
from .support import cli_password

if sys.version_info >= (3, 11):
    import tomllib
else:  # the airflow extra installs tomli on 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("FTE_AIRFLOW2_VENV", REPO / ".venv-af2"))
VERSION = "2.11.0"
#: Airflow 2.11 sets an attribute on cryptography's ``MultiFernet`` (``is_encrypted``),
#: which cryptography 51's Rust ``MultiFernet`` refuses: every connection read fails.
#: Airflow's own constraints for 2.11 pin an older cryptography; so do we.
PINS = ("cryptography<51", "psycopg2-binary>=2.9,<3")  # psycopg2: SQLAlchemy 1.4's driver
INSTALL_TIMEOUT = float(os.environ.get("FTE_AIRFLOW2_INSTALL_TIMEOUT", "900"))
START_TIMEOUT = float(os.environ.get("FTE_AIRFLOW_START_TIMEOUT", "240"))
DAGS_SOURCE = Path(__file__).parent / "airflow2_dags"


#: Bump when what ``_install_project`` puts into the venv changes: existing venvs then
#: get the new step once (Airflow itself stays installed).
PROJECT_STEP = "project-3"


def ensure_airflow2() -> Path:
    """Return Airflow 2's ``airflow`` command, installing it (and this project) if needed."""
    exe = VENV / "bin" / "airflow"
    VENV.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + INSTALL_TIMEOUT
    with open(str(VENV) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test sessions must not install at once
        marker = VENV / f".installed-{VERSION}"
        if not marker.exists():
            subprocess.run(
                [sys.executable, "-m", "venv", "--clear", str(VENV)], check=True, timeout=120
            )
            subprocess.run(
                [str(VENV / "bin" / "pip"), "install", "-q", f"apache-airflow=={VERSION}", *PINS],
                check=True,
                timeout=max(1.0, deadline - time.monotonic()),
            )
            marker.touch()
        # The editable install points at this checkout, and the core's dependencies may
        # change: a venv made for another clone or other dependencies redoes the step.
        with open(REPO / "pyproject.toml", "rb") as f:
            core = tomllib.load(f)["project"]["dependencies"]
        project_marker = VENV / f".installed-{PROJECT_STEP}"
        wanted = "\n".join([str(REPO), *core])
        if not project_marker.exists() or project_marker.read_text() != wanted:
            _install_project(core, deadline)
            project_marker.write_text(wanted)
    return exe


def _install_project(core: list[str], deadline: float) -> None:
    """Make this checkout importable in the Airflow 2 venv, entry point included."""
    pip = [str(VENV / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
    # Airflow named again: pip then keeps every requirement of the installed Airflow.
    subprocess.run(
        [*pip, f"apache-airflow=={VERSION}", *PINS, *core],
        check=True,
        timeout=max(1.0, deadline - time.monotonic()),
    )
    subprocess.run(
        [*pip, "--no-deps", "-e", str(REPO)],
        check=True,
        timeout=max(1.0, deadline - time.monotonic()),
    )


def airflow2_env(home: Path, exe: Path, db: OwnPostgres, extra: dict[str, str]) -> dict[str, str]:
    """The environment of an Airflow 2 command with its own home and database (no examples).

    Nothing of the test process's Airflow 3 setup (``AIRFLOW*``), venv or Python
    settings may leak into Airflow 2.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "VIRTUAL_ENV", "PYTHON"))
    }
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db.url_for("psycopg2"),
            "PATH": f"{exe.parent}:{os.environ.get('PATH', '')}",
            **extra,
        }
    )
    return env


@dataclass
class Airflow2Server:
    home: Path
    exe: Path
    port: int = field(default_factory=free_port)
    username: str = "admin"
    password: str = field(default_factory=cli_password)
    proc: subprocess.Popen[bytes] | None = None
    postgres: OwnPostgres | None = None
    _database: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        assert self.postgres is not None, "prepare() starts the database"
        return airflow2_env(
            self.home,
            self.exe,
            self.postgres,
            {
                "AIRFLOW__API__AUTH_BACKENDS": "airflow.api.auth.backend.basic_auth",
                "AIRFLOW__WEBSERVER__SECRET_KEY": secrets.token_hex(32),
                "AIRFLOW__WEBSERVER__WORKERS": "1",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            },
        )

    def _run(self, *args: str, timeout: float = START_TIMEOUT) -> None:
        with open(self.home / "setup.log", "ab") as log:
            subprocess.run(
                [str(self.exe), *args],
                env=self.env(),
                check=True,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )

    def prepare(self) -> None:
        if self.postgres is None:
            self.postgres = self._database.enter_context(own_postgres())
        (self.home / "dags").mkdir(parents=True, exist_ok=True)
        for src in DAGS_SOURCE.glob("*.py"):
            shutil.copy(src, self.home / "dags" / src.name)
        self._run("db", "migrate")
        self._run(
            "users",
            "create",
            "--username",
            self.username,
            f"--password={self.password}",  # one argument whatever the value begins with
            "--role",
            "Admin",
            "--firstname",
            "Test",
            "--lastname",
            "Admin",
            "--email",
            "admin@example.invalid",
        )
        self.reserialize()

    def reserialize(self) -> None:
        """Parse the DAGs folder into the database now (registers the datasets it uses)."""
        self._run("dags", "reserialize")

    def start(self) -> None:
        log = open(self.home / "webserver.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(
            [
                str(self.exe),
                "webserver",
                "--hostname",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        proc = self.proc

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError("Airflow 2 webserver exited:\n" + self.log())
            with contextlib.suppress(requests.RequestException):
                return requests.get(f"{self.url}/api/v1/health", timeout=5).status_code == 200
            return False

        poll_until(up, "the Airflow 2 webserver", START_TIMEOUT, 0.5, details=self.log)

    def stop(self) -> None:
        """Stop the webserver, then the database server."""
        if self.proc is not None:
            stop_group(self.proc, timeout=30)
        self._database.close()
        self.postgres = None

    def log(self) -> str:
        path = self.home / "webserver.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


@pytest.fixture(scope="session")
def airflow2() -> Iterator[Airflow2Server]:
    """A real Airflow 2.11 webserver for the session (see the module docstring)."""
    exe = ensure_airflow2()
    home = Path(tempfile.mkdtemp(prefix="fte-airflow2-"))
    server = Airflow2Server(home=home, exe=exe)
    with running(server, home):
        yield server
