"""The smallest real Airflow the deferred-wait tests need: api-server (execution API),
scheduler, dag-processor and triggerer on 127.0.0.1, SQLite, LocalExecutor.

Each component runs in its own session (process group), so stopping it stops only what
this module started (the scheduler's task processes included), by PID.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..servers import free_port


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class LiveAirflow:
    def __init__(self, home: Path, env: dict[str, str], api: str) -> None:
        self.home = home
        self.env = env
        self.api = api
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def db(self) -> Path:
        return self.home / "airflow.db"

    def start(self, *args: str) -> None:
        log = open(self.home / f"{args[0]}.log", "ab")  # noqa: SIM115 (kept with the process)
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "airflow", *args], env=self.env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)

    def query(self, sql: str, *params: object) -> list[tuple[object, ...]]:
        with sqlite3.connect(self.db, timeout=10) as conn:
            return conn.execute(sql, params).fetchall()

    def wait_for(self, what: str, predicate, timeout: float = 90.0,  # type: ignore[no-untyped-def]
                 every: float = 0.05) -> float:
        """Poll ``predicate`` until true; return when it became true (monotonic)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise AssertionError(f"{proc.args[3]} exited: see {self.home}")
            if predicate():
                return time.monotonic()
            time.sleep(every)
        raise AssertionError(f"timed out waiting for {what}; logs in {self.home}")

    def ti_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        rows = self.query("select state from task_instance where dag_id=? and run_id=? and "
                          "task_id=?", dag_id, run_id, task_id)
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    def post_asset_event(self, uri: str, extra: dict[str, object]) -> None:
        """Post an asset event through the REST API, as the forwarder does."""
        import requests

        token = requests.get(f"{self.api}/auth/token", timeout=30).json()["access_token"]
        auth = {"Authorization": f"Bearer {token}"}
        assets = requests.get(f"{self.api}/api/v2/assets", params={"uri_pattern": uri},
                              headers=auth, timeout=30).json()["assets"]
        (asset_id,) = [a["id"] for a in assets if a["uri"] == uri]
        for _ in range(3):
            resp = requests.post(f"{self.api}/api/v2/assets/events", headers=auth, timeout=30,
                                 json={"asset_id": asset_id, "extra": extra})
            # SQLite shared by four components can answer 'database is locked' (500): the
            # request was rolled back, so posting it again cannot double the event.
            if resp.status_code < 500:
                break
            time.sleep(1)
        assert resp.status_code == 200, (resp.status_code, resp.text, self.home)

    def trigger(self, dag_id: str, run_id: str) -> None:
        subprocess.run([sys.executable, "-m", "airflow", "dags", "trigger", dag_id,
                        "--run-id", run_id], env=self.env, check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def live_airflow(home: Path, base_env: dict[str, str], extra_env: dict[str, str],
                 dag_ids: list[str]) -> Iterator[LiveAirflow]:
    """Start the components with DAG files already in ``home/dags``; stop them after."""
    port = free_port()
    env = {**os.environ, **base_env, **extra_env,
           "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(port),
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
           "AIRFLOW__API_AUTH__JWT_SECRET": "fte-live-tests-" + "x" * 64,
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
           "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
           "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
           "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
           "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "1"}
    af = LiveAirflow(home, env, f"http://127.0.0.1:{port}")
    try:
        af.start("api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1")
        af.start("dag-processor")
        af.start("scheduler", "--skip-serve-logs")
        af.start("triggerer", "--skip-serve-logs")
        af.wait_for("the api-server to listen", lambda: _listening(port), timeout=120,
                    every=0.5)
        for dag_id in dag_ids:
            af.wait_for(f"DAG {dag_id} parsed", lambda d=dag_id: af.query(
                "select 1 from dag where dag_id=? and is_stale=0", d), timeout=120, every=0.5)
        yield af
    finally:
        af.stop()
