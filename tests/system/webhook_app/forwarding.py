"""Helpers of the forwarding tests against the real Airflow 3 (both test modules use them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil

from fivetran_events import Settings
from fivetran_events.deliveries import Delivery, DeliveryState
from fivetran_events.keys import delivery_id
from testkit.airflow_harness import AirflowServer
from testkit.processes import poll_until
from testkit.worker_process import WorkerProcess
from webhook_app.forwarding.forwarder import Forwarder


def uri(connector_id: str) -> str:
    """The dataset URI the worker forwards a connector to (the default template)."""
    return f"fivetran://connector/{connector_id}"


def start_worker(
    af_settings: Settings, tmp_path: Path, name: str = "worker", **extra: Any
) -> WorkerProcess:
    """A worker process whose backoff is short enough for a test."""
    extra = {"forward_backoff_max_seconds": 2, **extra}
    return WorkerProcess(af_settings, tmp_path, name, **extra)


def events_of(airflow3: AirflowServer, connector_id: str, sync_id: str) -> list[dict[str, Any]]:
    """Airflow's events of one sync on the connector's asset."""
    return [
        e
        for e in airflow3.asset_events(uri(connector_id))
        if (e.get("extra") or {}).get("sync_id") == sync_id
    ]


def wait_state(
    fw: Forwarder,
    connector_id: str,
    sync_id: str,
    state: DeliveryState,
    timeout: float = 60.0,
    worker: WorkerProcess | None = None,
) -> Delivery:
    """Poll the delivery of (connector, sync) until it is in ``state``."""
    did = delivery_id(connector_id, sync_id, uri(connector_id))

    def in_state() -> Delivery | None:
        d = fw.store.get(did)
        return d if d is not None and d.state is state else None

    return poll_until(
        in_state,
        f"delivery {did} to be {state.value}",
        timeout,
        details=lambda: f"it is {fw.store.get(did)}\n" + (worker.log() if worker else ""),
    )


def unread_bytes(port: int, client_pid: int) -> int:
    """Bytes ``client_pid`` (or a process of its pool) sent to 127.0.0.1:``port`` that the
    server has not read yet.

    A stopped (SIGSTOP) server's kernel still accepts connections and buffers requests;
    this reads the server side's receive queue from ``/proc/net/tcp`` (Linux).
    """
    client = psutil.Process(client_pid)
    client_ports = {
        c.laddr.port
        for p in (client, *client.children(recursive=True))
        for c in p.net_connections("tcp4")
        if c.raddr and c.raddr.port == port
    }
    waiting = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rsplit(":", 1)[1], 16)
        remote_port = int(fields[2].rsplit(":", 1)[1], 16)
        if local_port == port and remote_port in client_ports:
            waiting += int(fields[4].split(":")[1], 16)
    return waiting
