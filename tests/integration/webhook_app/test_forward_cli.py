"""The forwarding CLI (deliveries, replay, datasets check, worker) and its metrics."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import REGISTRY

from fivetran_events import Settings
from testkit.airflow2_standin import SESSION_AUTH, Airflow2StandIn
from testkit.forward_support import forwarder, post_event, run_worker
from testkit.worker_process import worker_env
from webhook_app.cli import main
from webhook_app.forwarding.forwarder import Forwarder

pytestmark = pytest.mark.timeout(60)

CID = "assimilate_seem"
URI = f"fivetran://connector/{CID}"


@pytest.fixture
def fw(settings: Settings, airflow2_standin: Airflow2StandIn) -> Forwarder:
    return forwarder(
        settings, airflow2_standin.url, airflow2_standin.username, airflow2_standin.password
    )


@pytest.fixture
def env(fw: Forwarder) -> dict[str, str]:
    return worker_env(fw.settings)


def cli(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(main, list(args), env=env)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class TestDeliveriesAndReplay:
    def test_lists_states_and_replays_a_sync(
        self, http: Any, fw: Forwarder, airflow2_standin: Airflow2StandIn, env: dict[str, str]
    ) -> None:
        """deliveries shows the reason of an undelivered sync; replay SYNC_ID delivers it."""
        post_event(http, sync_id="s1")
        run_worker(fw)
        out = cli(env, "deliveries")
        assert out.exit_code == 0 and "undelivered" in out.output and "404" in out.output
        assert "s1" not in cli(env, "deliveries", "--state", "delivered").output
        airflow2_standin.add_dataset(URI)
        assert "replayed 1 delivery" in cli(env, "replay", "s1").output
        run_worker(fw)
        out = cli(env, "deliveries", "--state", "delivered", "--json")
        assert '"airflow_event_id": 1' in out.output
        assert "already delivered" in cli(env, "replay", "s1").output

    def test_replay_needs_one_target(self, env: dict[str, str]) -> None:
        assert cli(env, "replay").exit_code == 2
        assert cli(env, "replay", "s1", "--all-undelivered").exit_code == 2
        out = cli(env, "replay", "unknown-sync")
        assert out.exit_code == 2 and "no deliveries recorded" in out.output  # usage error

    def test_datasets_check(
        self, http: Any, fw: Forwarder, airflow2_standin: Airflow2StandIn, env: dict[str, str]
    ) -> None:
        """Lists the recorded connectors' URIs and whether Airflow knows each."""
        post_event(http, sync_id="s1")
        out = cli(env, "datasets", "check")
        assert out.exit_code == 1 and "MISSING" in out.output and URI in out.output
        airflow2_standin.add_dataset(URI)
        out = cli(env, "datasets", "check")
        assert out.exit_code == 0 and "ok" in out.output

    def test_datasets_check_names_airflow_2s_basic_auth_setting(
        self, http: Any, airflow2_standin: Airflow2StandIn, env: dict[str, str]
    ) -> None:
        """On a stock Airflow 2 (session auth only) the error names the setting to change."""
        airflow2_standin.auth_backends = (SESSION_AUTH,)
        post_event(http, sync_id="s1")
        out = cli(env, "datasets", "check")
        assert out.exit_code == 5 and "Traceback" not in out.output  # refused, not "missing"
        assert "[api] auth_backends includes airflow.api.auth.backend.basic_auth" in out.output

    def test_worker_refuses_to_start_without_airflow(self, env: dict[str, str]) -> None:
        env = {k: v for k, v in env.items() if "AIRFLOW" not in k}
        out = cli(env, "worker", "--burst")
        assert out.exit_code == 2 and "FIVETRAN_EVENTS_AIRFLOW_URL" in out.output  # usage error

    def test_worker_burst_delivers(
        self, http: Any, fw: Forwarder, airflow2_standin: Airflow2StandIn, env: dict[str, str]
    ) -> None:
        airflow2_standin.add_dataset(URI)
        post_event(http, sync_id="s1")
        out = cli(env, "worker", "--burst")
        assert out.exit_code == 0, out.output
        assert len(airflow2_standin.events) == 1


class TestMetrics:
    def test_outcomes_and_latency_are_counted(
        self, http: Any, fw: Forwarder, airflow2_standin: Airflow2StandIn
    ) -> None:
        name = "fivetran_events_forward_attempts_total"
        before = (
            sample(name, outcome="delivered"),
            sample(name, outcome="undelivered"),
            sample("fivetran_events_forward_latency_seconds_count"),
        )
        post_event(http, sync_id="s1")
        run_worker(fw)
        airflow2_standin.add_dataset(URI)
        post_event(http, sync_id="s2")
        run_worker(fw)
        assert sample(name, outcome="undelivered") == before[1] + 1
        assert sample(name, outcome="delivered") == before[0] + 1
        assert sample("fivetran_events_forward_latency_seconds_count") == before[2] + 1
        body = http.get("/metrics").get_data(as_text=True)
        assert "fivetran_events_forward_latency_seconds_bucket" in body
