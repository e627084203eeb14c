"""Deferred waits on a real scheduler and triggerer (dag.test() cannot show these).

A sync recorded through the webhook while the sensor is deferred releases it within a
second; with the publish lost, within one re-check interval.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support import payload

from .conftest import AIRFLOW_ENV, conn_uri
from .dagtest import post
from .live import LiveAirflow, live_airflow

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

DAG_FILE = '''
from datetime import datetime, timezone

from airflow.sdk import DAG

from airflow_plugin.sensors import FivetranDateTimeSensor

for name, recheck in (("live_wake", 300), ("live_lost", 4)):
    with DAG(name, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
             catchup=False) as dag:
        FivetranDateTimeSensor(task_id="wait", connector_id=name, deferrable=True,
                               recheck_interval=recheck, timeout=600)
    globals()[name] = dag
'''
RECHECK_LOST = 4


@pytest.fixture(scope="module")
def live(airflow_db: Path, redis_proc) -> Iterator[LiveAirflow]:  # type: ignore[no-untyped-def]
    (airflow_db / "dags" / "live_dags.py").write_text(DAG_FILE)
    uri = conn_uri(f"redis://{redis_proc.host}:{redis_proc.port}/0", "test:")
    with live_airflow(airflow_db, AIRFLOW_ENV, {"AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS": uri},
                      ["live_wake", "live_lost"]) as af:
        yield af


def deferred_and_listening(live: LiveAirflow, client: redis.Redis, dag_id: str,
                           run_id: str) -> None:
    live.trigger(dag_id, run_id)
    live.wait_for("the sensor to defer",
                  lambda: live.ti_state(dag_id, run_id, "wait") == "deferred", timeout=120)
    live.wait_for("the triggerer to subscribe",
                  lambda: client.execute_command("PUBSUB", "NUMPAT") >= 1, timeout=60)
    time.sleep(0.5)  # it did its first read and waits


def release_time(live: LiveAirflow, dag_id: str, run_id: str, timeout: float) -> float:
    t0 = time.monotonic()
    t1 = live.wait_for("the trigger to fire",
                       lambda: live.ti_state(dag_id, run_id, "wait") != "deferred",
                       timeout=timeout, every=0.02)
    live.wait_for("the sensor to succeed",
                  lambda: live.ti_state(dag_id, run_id, "wait") in ("success", "failed"),
                  timeout=120)
    assert live.ti_state(dag_id, run_id, "wait") == "success"
    return t1 - t0


class TestDeferredOnRealTriggerer:
    def test_sync_arriving_while_deferred_releases_within_a_second(self, live, client,
                                                                   http) -> None:
        """The webhook write publishes; the triggerer's shared listener wakes the trigger."""
        deferred_and_listening(live, client, "live_wake", "wake1")
        post(http, payload("sync_end", "live_wake", sync_id="s-wake"))
        assert release_time(live, "live_wake", "wake1", timeout=30) < 1.0

    def test_lost_publish_releases_within_one_recheck_interval(self, live, client, http,
                                                               monkeypatch) -> None:
        """With the publish lost, the trigger's periodic re-check finds the sync."""
        monkeypatch.setattr(redis.client.Pipeline, "publish", lambda self, *a, **k: self)
        deferred_and_listening(live, client, "live_lost", "lost1")
        post(http, payload("sync_end", "live_lost", sync_id="s-lost"))
        assert release_time(live, "live_lost", "lost1", timeout=30) < RECHECK_LOST + 1.0
