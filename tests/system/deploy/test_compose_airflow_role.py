"""deploy/compose.yaml gives the worker's Airflow user the least role that can forward:
a real worker delivers with that role on a real Airflow 3, and fails with the role below."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from fivetran_events import Settings
from fivetran_events.deliveries import Delivery, DeliveryState
from fivetran_events.keys import delivery_id
from testkit.airflow_harness import ROLE_USERS, AirflowServer
from testkit.forward_support import forwarder, post_event
from testkit.processes import poll_until
from testkit.worker_process import WorkerProcess
from webhook_app.forwarding.forwarder import Forwarder

pytestmark = pytest.mark.timeout(480)

COMPOSE = Path(__file__).resolve().parents[3] / "deploy" / "compose.yaml"
CONNECTOR = "e2e_conn"  # testkit/airflow_dags has a DAG on its dataset
URI = f"fivetran://connector/{CONNECTOR}"


def compose_worker_role() -> str:
    """The simple auth manager role compose.yaml gives the worker's Airflow user."""
    doc = yaml.safe_load(COMPOSE.read_text())
    username = doc["x-fte"]["environment"]["FIVETRAN_EVENTS_AIRFLOW_USERNAME"]
    users = doc["x-airflow"]["environment"]["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
    roles = dict(u.split(":")[:2] for u in users.split(","))
    return cast(str, roles[username]).lower()


def role_below(role: str) -> str:
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import (
        SimpleAuthManagerRole,
    )

    order = SimpleAuthManagerRole[role.upper()].order
    return cast(str, next(r.name.lower() for r in SimpleAuthManagerRole if r.order == order - 1))


@pytest.fixture
def start(settings: Settings, airflow3: AirflowServer, tmp_path: Path) -> Iterator[Any]:
    """Start a real ``fivetran-events worker`` as the harness user of a role."""
    started: list[WorkerProcess] = []

    def run(role: str) -> WorkerProcess:
        user = ROLE_USERS[role]
        w = WorkerProcess(
            settings,
            tmp_path,
            f"worker-{role}",
            airflow_url=airflow3.url,
            airflow_username=user,
            airflow_password=airflow3.role_passwords[user],
            forward_backoff_max_seconds=2,
        )
        started.append(w)
        return w

    yield run
    for w in started:
        w.stop()


def settled(fw: Forwarder, sync_id: str, worker: WorkerProcess) -> Delivery:
    did = delivery_id(CONNECTOR, sync_id, URI)

    def done() -> Delivery | None:
        d = fw.store.get(did)
        return d if d and d.state in (DeliveryState.DELIVERED, DeliveryState.FAILED) else None

    return poll_until(
        done,
        f"delivery {did} to settle",
        60,
        0.2,
        details=lambda: f"{fw.store.get(did)}\n{worker.log()}",
    )


def test_the_worker_is_not_admin() -> None:
    assert compose_worker_role() not in ("admin", "")


def test_worker_delivers_with_the_compose_role_and_not_below(
    http: Any, settings: Settings, airflow3: AirflowServer, start: Any
) -> None:
    """The compose role posts the asset event; the next lesser role gets 403."""
    airflow3.wait_for_asset(URI)
    fw = forwarder(settings, airflow3.url, airflow3.username, airflow3.password)
    role = compose_worker_role()

    ok = f"role-{role}-{uuid.uuid4()}"
    worker = start(role)
    post_event(http, connector_id=CONNECTOR, sync_id=ok)
    d = settled(fw, ok, worker)
    assert d.state is DeliveryState.DELIVERED, d.fields
    events = [e for e in airflow3.asset_events(URI) if e["extra"].get("sync_id") == ok]
    assert [e["id"] for e in events] == [int(d.fields["event_id"])]
    worker.stop()

    lesser = role_below(role)
    refused = f"role-{lesser}-{uuid.uuid4()}"
    worker = start(lesser)
    post_event(http, connector_id=CONNECTOR, sync_id=refused)
    d = settled(fw, refused, worker)
    assert d.state is DeliveryState.FAILED and "403" in (d.get("reason") or ""), d.fields
    assert not [e for e in airflow3.asset_events(URI) if e["extra"].get("sync_id") == refused]
