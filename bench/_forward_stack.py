"""The forward benchmark's stack: everything it measures, on 127.0.0.1, stopped by PID.

A redis-server, a real Airflow 3 (testkit/airflow_harness.py) with a watcher DAG, the
loopback proxy that can hold a POST (testkit/delaying_proxy.py), the webhook server
(``fivetran-events serve``, gunicorn) and ``fivetran-events worker`` (a pool of
``--concurrency`` processes, its default unless given), which reaches Airflow through
the proxy. Each runs in a session of its own; leaving the context stops those groups.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fivetran_events import Settings
from testkit.airflow_harness import AirflowServer
from testkit.delaying_proxy import Holds, delaying_proxy
from testkit.own_redis import own_redis
from testkit.processes import stop_group
from testkit.servers import webhook_server
from testkit.support import conn_uri

CONNECTOR = "bench_conn"
URI = f"fivetran://connector/{CONNECTOR}"
WATCHED = "bench_watch"
WATCHED_URI = f"fivetran://connector/{WATCHED}"
UNFORWARDED_URI = "fivetran://bench/not-forwarded"
WATCHER_DAG = f"""
from datetime import datetime, timezone
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher
from airflow_plugin.triggers.watcher import FivetranSyncWatcherTrigger

asset = Asset(uri="{WATCHED_URI}", name="bench_watch", watchers=[AssetWatcher(
    name="bench_watch", trigger=FivetranSyncWatcherTrigger(connector_id="{WATCHED}"))])
with DAG("bench_on_watch", schedule=[asset], catchup=False,
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
    EmptyOperator(task_id="consume")
"""
#: The DAGs the two connectors' asset events start (testkit/airflow_dags, WATCHER_DAG).
DAGS = (f"consume_{CONNECTOR}", "bench_on_watch")
SECRET = "bench-webhook-secret-0123456789"  # settings want >= 24 bytes
#: How long the proxy holds the slow answer: the worker's Airflow timeout (its default).
HOLD_S = float(Settings.model_fields["airflow_timeout_seconds"].default)
#: What the benchmark's Airflow runs on (printed with the figures).
AIRFLOW_SETUP = "Airflow 3 (PostgreSQL, LocalExecutor, testkit/airflow_harness.py)"


@dataclass
class Stack:
    """What a measurement talks to."""

    url: str  # the webhook server
    airflow: AirflowServer
    holds: Holds  # arm the proxy: ``holds.holds = 1`` holds the next event POST
    redis_port: int
    work: Path


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


@contextmanager
def forward_stack(work: Path, concurrency: int | None) -> Iterator[Stack]:
    """Start the stack (a minute or so on 2 cores); stop exactly what it started."""
    bin_dir = Path(sys.executable).parent
    with ExitStack() as stack:
        redis_server = stack.enter_context(own_redis(work / "redis"))
        redis_port = redis_server.port
        airflow = AirflowServer(
            home=work / "airflow",
            extra_env={
                "AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS": conn_uri(
                    f"redis://127.0.0.1:{redis_port}/0", "fte:"
                )
            },
        )
        stack.callback(airflow.stop)
        airflow.prepare()
        airflow.add_dag("bench_watch.py", WATCHER_DAG)
        airflow.start()
        airflow.wait_for_asset(URI)
        # The watcher stores its start position once it runs: syncs after that count.
        airflow.wait_for(
            "the watcher", lambda: airflow.asset_state(f"fivetran_events.position:{WATCHED}"), 180
        )
        proxy_url, holds = stack.enter_context(delaying_proxy(airflow.port, HOLD_S, holds=0))
        # The watched connector reaches Airflow through the watcher alone: its REST
        # deliveries go to a URI no DAG uses (ended by one lookup, nothing posted), so the
        # REST path's POSTs are the measured connector's only.
        mapping = work / "datasets.toml"
        mapping.write_text(f'[connectors]\n{WATCHED} = "{UNFORWARDED_URI}"\n')
        ours: dict[str, Any] = {  # the webhook server and the worker alike
            "FIVETRAN_EVENTS_KEY_PREFIX": "fte:",
            "FIVETRAN_EVENTS_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "FIVETRAN_EVENTS_WEBHOOK_SECRETS": SECRET,
            "FIVETRAN_EVENTS_AIRFLOW_URL": proxy_url,
            "FIVETRAN_EVENTS_DATASET_MAPPING_FILE": str(mapping),
            "FIVETRAN_EVENTS_AIRFLOW_USERNAME": airflow.username,
            "FIVETRAN_EVENTS_AIRFLOW_PASSWORD": airflow.password,
            # In the bench's folder (serve would make one in /tmp and leave it).
            "PROMETHEUS_MULTIPROC_DIR": str(work / "metrics"),
        }
        url, _web = stack.enter_context(webhook_server(redis_server.url, work, **ours))
        env = {k: v for k, v in os.environ.items() if not k.startswith("FIVETRAN_EVENTS_")}
        env.update(ours)
        pool = ["--concurrency", str(concurrency)] if concurrency else []
        cli = str(bin_dir / "fivetran-events")
        stack.callback(stop_group, _spawn([cli, "worker", *pool], env, work / "worker.log"))
        yield Stack(url, airflow, holds, redis_port, work)
