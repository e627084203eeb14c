"""The history watchers' DAG on the session's Airflow 3: deployed, and their events read.

Shared by ``test_event_trigger_live.py`` and ``test_event_trigger_failed_ack.py``.
"""

from __future__ import annotations

from typing import Any

from testkit.airflow_harness import AirflowServer

POLL = 5  # the watchers' tick, seconds

DAG_TEMPLATE = """
from datetime import datetime, timezone

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher

from airflow_plugin.triggers.watcher import FivetranSyncWatcherTrigger

for name, conn in {watchers!r}:
    trigger = FivetranSyncWatcherTrigger(
        connector_id=name, redis_conn_id=conn, poll_interval={poll}
    )
    asset = Asset(uri=f"fivetran://connector/{{name}}", name=f"asset_{{name}}",
                  watchers=[AssetWatcher(name=f"watch_{{name}}", trigger=trigger)])
    with DAG(f"on_{{name}}", schedule=[asset], start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
             catchup=False) as dag:
        EmptyOperator(task_id="consume")
    globals()[f"on_{{name}}"] = dag
"""


def uri(connector: str) -> str:
    return f"fivetran://connector/{connector}"


def position_key(connector: str) -> str:
    return f"fivetran_events.position:{connector}"


def trigger_events(airflow3: AirflowServer, connector: str) -> list[dict[str, Any]]:
    """The payloads of the asset's events that came from a trigger, oldest first."""
    return [
        e["extra"]["payload"]
        for e in airflow3.asset_events(uri(connector))
        if (e.get("extra") or {}).get("from_trigger")
    ]


def watch(airflow3: AirflowServer, filename: str, watchers: list[tuple[str, str]]) -> None:
    """Deploy the watchers' DAG file; return once each watcher stored its start position."""
    airflow3.add_dag(filename, DAG_TEMPLATE.format(watchers=watchers, poll=POLL))
    airflow3.wait_for_parsed(*(f"on_{name}" for name, _ in watchers))
    for name, _ in watchers:
        airflow3.wait_for(
            f"watcher of {name} running",
            lambda n=name: airflow3.asset_state(position_key(n)),  # type: ignore[misc]
            180,
        )
