"""What a test asks of a running Airflow 3: its REST API as admin, and its database.

``AirflowServer`` (testkit/airflow_harness.py) starts and stops the components and mixes
this in; here is only the asking: a JWT, authenticated requests, waits that fail at once
when a component died, asset and DAG-run lookups, and direct reads of the PostgreSQL
metadata database for polling loops (psycopg: ``%s`` placeholders; timestamps come back
as aware datetimes, JSON columns as Python values).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import requests

from .own_postgres import OwnPostgres
from .processes import poll_until

T = TypeVar("T")
USERNAME = "admin"


class AirflowApi:
    """The REST and database helpers of a running Airflow (mixed into AirflowServer)."""

    home: Path
    port: int
    password: str
    jwt_secret: str
    _token: str | None
    postgres: OwnPostgres | None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def username(self) -> str:
        return USERNAME

    @property
    def dags_folder(self) -> Path:
        return self.home / "dags"

    def _check_alive(self, doing: str) -> None:
        """Fail at once when a component exited (the server that started them knows)."""
        raise NotImplementedError

    def logs(self, name: str | None = None, tail: int = 40) -> str:
        raise NotImplementedError

    def token(self, fresh: bool = False) -> str:
        if self._token is None or fresh:
            resp = requests.post(
                f"{self.url}/auth/token",
                timeout=10,
                json={"username": USERNAME, "password": self.password},
            )
            resp.raise_for_status()
            self._token = str(resp.json()["access_token"])
        return self._token

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """Call the REST API as admin; renew the token once on 401."""
        for attempt in range(2):
            headers = {"Authorization": f"Bearer {self.token(fresh=attempt > 0)}"}
            resp = requests.request(method, self.url + path, headers=headers, timeout=15, **kwargs)
            if resp.status_code != 401:
                return resp
        return resp

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def expired_token(self) -> str:
        """A token Airflow itself issued, re-signed with ``exp`` in the past."""
        import jwt

        real = self.token(fresh=True)
        header = jwt.get_unverified_header(real)
        claims = jwt.decode(real, options={"verify_signature": False})
        claims["exp"] = int(time.time()) - 60
        claims["iat"] = claims["nbf"] = int(time.time()) - 3600
        return jwt.encode(
            claims,
            self.jwt_secret,
            algorithm=header["alg"],
            headers={k: v for k, v in header.items() if k not in ("alg", "typ")},
        )

    def add_dag(self, filename: str, source: str) -> Path:
        """Write a DAG file into the DAGs folder; the dag-processor picks it up."""
        path = self.dags_folder / filename
        tmp = path.with_suffix(".tmp")
        tmp.write_text(source)
        tmp.rename(path)
        return path

    def wait_for(
        self,
        what: str,
        check: Callable[[], T | None],
        timeout: float = 90.0,
        interval: float = 0.5,
    ) -> T:
        """Poll ``check()`` until it returns something truthy; fail after ``timeout``.

        Unlike a bare ``poll_until`` it fails at once when a component has exited.
        """

        def alive_and_checked() -> T | None:
            self._check_alive(f"waiting for {what}")
            return check()

        return poll_until(
            alive_and_checked, what, timeout, interval, details=lambda: self.logs(tail=20)
        )

    def wait_for_dag(self, dag_id: str, timeout: float = 120.0) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            resp = self.get(f"/api/v2/dags/{dag_id}")
            return resp.json() if resp.status_code == 200 else None

        return self.wait_for(f"DAG {dag_id}", found, timeout)

    def asset_id(self, uri: str) -> int | None:
        resp = self.get("/api/v2/assets", params={"uri_pattern": uri, "limit": 100})
        for a in resp.json().get("assets", []) if resp.status_code == 200 else []:
            if a["uri"] == uri:
                return int(a["id"])
        return None

    def wait_for_asset(self, uri: str, timeout: float = 120.0) -> int:
        return self.wait_for(f"asset {uri}", lambda: self.asset_id(uri), timeout)

    def asset_events(self, uri: str) -> list[dict[str, Any]]:
        asset = self.asset_id(uri)
        if asset is None:
            return []
        params = {"asset_id": asset, "limit": 1000, "order_by": "timestamp"}

        def listed() -> tuple[list[dict[str, Any]]] | None:
            resp = self.get("/api/v2/assets/events", params=params)
            # Airflow 3.3 answers 500 while a listed event's created run is queued (its
            # start_date is still null: apache/airflow#71360, fixed by #71379); the
            # scheduler starts such a run within a loop or two on a working machine.
            if resp.status_code == 500:
                return None
            resp.raise_for_status()
            return (list(resp.json()["asset_events"]),)  # a tuple: an empty list is found too

        return self.wait_for(f"the events of {uri} (500 while a run is queued)", listed)[0]

    def post_asset_event(self, uri: str, extra: dict[str, Any]) -> None:
        """Post an asset event through the REST API, as the forwarder does."""
        asset = self.wait_for_asset(uri)
        resp = self.request(
            "POST", "/api/v2/assets/events", json={"asset_id": asset, "extra": extra}
        )
        assert resp.status_code == 200, (resp.status_code, resp.text)

    def trigger(self, dag_id: str, run_id: str) -> None:
        """Start a manual run (no logical date: Airflow 3 gives it no data interval)."""
        resp = self.request(
            "POST",
            f"/api/v2/dags/{dag_id}/dagRuns",
            json={"dag_run_id": run_id, "logical_date": None},
        )
        assert resp.status_code == 200, (resp.status_code, resp.text)

    # --- the metadata database, read directly (faster than the API in a polling loop) --

    def query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        """Rows of one statement (``%s`` placeholders) on Airflow's metadata database."""
        assert self.postgres is not None, "Airflow is not prepared"
        return self.postgres.rows(sql, *params)

    def ti_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        rows = self.query(
            "select state from task_instance where dag_id=%s and run_id=%s and task_id=%s",
            dag_id,
            run_id,
            task_id,
        )
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    def wait_for_parsed(self, *dag_ids: str, timeout: float = 120.0) -> None:
        """Wait until the dag-processor has serialized each DAG (so the scheduler runs it)."""
        for dag_id in dag_ids:

            def parsed(d: str = dag_id) -> list[tuple[Any, ...]]:
                return self.query("select 1 from serialized_dag where dag_id=%s", d)

            self.wait_for(f"DAG {dag_id} parsed", parsed, timeout)

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        resp = self.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100})
        return list(resp.json().get("dag_runs", [])) if resp.status_code == 200 else []
