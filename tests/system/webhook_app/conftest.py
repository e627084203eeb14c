"""Fixtures of the forwarding tests against the real Airflow 3: settings, Forwarder, workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fivetran_events import Settings
from testkit.airflow_harness import AirflowServer
from testkit.forward_support import forwarder
from testkit.worker_process import WorkerProcess
from webhook_app.forwarding.forwarder import Forwarder


@pytest.fixture
def af_settings(settings: Settings, airflow3: AirflowServer) -> Settings:
    return Settings(
        **{
            **{k: getattr(settings, k) for k in Settings.model_fields},
            "airflow_url": airflow3.url,
            "airflow_username": airflow3.username,
            "airflow_password": airflow3.password,
        }
    )


@pytest.fixture
def fw(af_settings: Settings, airflow3: AirflowServer) -> Forwarder:
    return forwarder(af_settings, airflow3.url, airflow3.username, airflow3.password)


@pytest.fixture
def workers(af_settings: Settings, tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Start workers with ``workers.append(start())``; all are stopped by PID afterwards."""
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        w.stop()
