"""Show the local stack working: wait for Airflow, send a signed sync_end, watch the DAG run.

Run by ``deploy/stack.sh up`` once every process is started; reads the same
environment (``FIVETRAN_EVENTS_*``, ``FTE_WEBHOOK_URL``, ``FTE_AIRFLOW_*``).
Exits non-zero, with one line saying what did not happen, after ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import requests

from fivetran_events.model import SIGNATURE_HEADER, sign
from fivetran_events.timeutil import iso, now_ms
from fivetran_events.uris import dataset_uri

T = TypeVar("T")
#: Seconds ``make up`` had run when it started this script, so our lines continue its clock.
_ORIGIN = time.monotonic() - float(os.environ.get("FTE_UP_STARTED", "0"))


def say(text: str) -> None:
    print(f"[{time.monotonic() - _ORIGIN:3.0f}s] ==> {text}", flush=True)


CONNECTOR = "demo_connector"
CONSUMER_DAG = "fivetran_asset_consumer"


class Airflow:
    def __init__(self, url: str, username: str, password: str) -> None:
        self.url, self.username, self.password = url, username, password
        self._token: str | None = None

    def token(self) -> str:
        if self._token is None:
            r = requests.post(
                f"{self.url}/auth/token",
                timeout=10,
                json={"username": self.username, "password": self.password},
            )
            r.raise_for_status()
            self._token = r.json()["access_token"]
        return self._token

    def get(self, path: str, **params: Any) -> requests.Response:
        return requests.get(
            self.url + path,
            params=params,
            timeout=10,
            headers={"Authorization": f"Bearer {self.token()}"},
        )


def wait(what: str, check: Callable[[], T | None], deadline: float) -> T:
    say(f"waiting for {what}")
    last: Exception | None = None
    started = time.monotonic()
    report = started + 10
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                say(f"{what}: after {time.monotonic() - started:.0f}s")
                return value
        except (requests.RequestException, KeyError, ValueError) as exc:
            last = exc
        if time.monotonic() >= report:
            say(f"  still waiting for {what}: {time.monotonic() - started:.0f}s")
            report += 10
        time.sleep(1)
    sys.exit(f"error: timed out waiting for {what}" + (f" ({last})" if last else ""))


def signed_sync_end(sync_id: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {
            "event": "sync_end",
            "created": iso(now_ms()),
            "connector_type": "postgres",
            "connector_id": CONNECTOR,
            "connector_name": "fivetran_demo",
            "sync_id": sync_id,
            "destination_group_id": "demo_group",
            "data": {"status": "SUCCESSFUL"},
        },
        separators=(",", ":"),
    ).encode()
    secret = os.environ["FIVETRAN_EVENTS_WEBHOOK_SECRETS"].split(",")[0].strip()
    return body, {SIGNATURE_HEADER: sign(body, secret), "Content-Type": "application/json"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    deadline = time.monotonic() + a.timeout
    af = Airflow(
        os.environ["FIVETRAN_EVENTS_AIRFLOW_URL"],
        os.environ["FIVETRAN_EVENTS_AIRFLOW_USERNAME"],
        os.environ["FIVETRAN_EVENTS_AIRFLOW_PASSWORD"],
    )

    def healthy() -> bool:
        body = requests.get(af.url + "/api/v2/monitor/health", timeout=5).json()
        return all(
            body.get(k, {}).get("status") == "healthy"
            for k in ("metadatabase", "scheduler", "dag_processor", "triggerer")
        )

    wait("Airflow's components to be healthy", healthy, deadline)
    wait(
        f"the example DAG {CONSUMER_DAG} to be parsed",
        lambda: af.get(f"/api/v2/dags/{CONSUMER_DAG}").status_code == 200,
        deadline,
    )
    uri = dataset_uri(CONNECTOR)
    wait(
        f"Airflow to know the dataset {uri}",
        lambda: any(
            x["uri"] == uri for x in af.get("/api/v2/assets", uri_pattern=uri).json()["assets"]
        ),
        deadline,
    )
    before = af.get(f"/api/v2/dags/{CONSUMER_DAG}/dagRuns").json()["total_entries"]
    sync_id = f"demo-{uuid.uuid4()}"
    body, headers = signed_sync_end(sync_id)
    r = requests.post(
        os.environ["FTE_WEBHOOK_URL"] + "/webhooks/fivetran", data=body, headers=headers, timeout=10
    )
    say(f"sent a signed sync_end ({sync_id}): {r.status_code} {r.text.strip()}")
    if r.status_code != 200:
        sys.exit("error: the webhook did not accept the demo sync_end")
    sent = time.monotonic()

    def new_run() -> dict[str, Any] | None:
        runs = af.get(f"/api/v2/dags/{CONSUMER_DAG}/dagRuns", order_by="-run_after", limit=1).json()
        return runs["dag_runs"][0] if runs["total_entries"] > before else None

    run = wait(f"a run of {CONSUMER_DAG} triggered by that sync", new_run, deadline)
    say(
        f"{CONSUMER_DAG} run {run['dag_run_id']} started "
        f"{time.monotonic() - sent:.1f} s after the webhook ({run['state']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
