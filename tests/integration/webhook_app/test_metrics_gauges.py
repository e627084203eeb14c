"""/metrics answers what on-call asks: deliveries by state and age, the due queue, each
connector's freshness, the last webhook; counters exist at 0 before their first event.

Real redis-server and the real Flask app; Airflow is the Airflow 2 stand-in where a
delivery has to fail in a given way (testkit/airflow2_standin.py). The clock is frozen
with freezegun, so every age is exact.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
from freezegun import freeze_time
from prometheus_client.parser import text_string_to_metric_families

from fivetran_events import Settings
from fivetran_events.freshness import Schedule
from fivetran_events.history.writer import record_schedules
from fivetran_events.timeutil import to_ms
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import forwarder, post_event, run_worker
from testkit.servers import free_port
from testkit.support import TOKEN, payload, signed
from webhook_app import create_app
from webhook_app.metrics import RedisGauges

pytestmark = pytest.mark.timeout(60)

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(http: Any, token: str | None = TOKEN) -> Samples:
    """GET /metrics (with the read API's token: every series) and parse it as Prometheus
    would."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    resp = http.get("/metrics", headers=headers)
    assert resp.status_code == 200
    return parse(resp.get_data(as_text=True))


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def series(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


@pytest.fixture
def frozen() -> Iterator[Any]:
    with freeze_time(T0) as clock:
        yield clock


class TestCountersStartAtZero:
    def test_every_outcome_is_exported_before_it_happens(self) -> None:
        """A 503 right after a restart must be a step from 0, or increase() never sees it.

        A fresh process: the counters are process-wide, and other tests increment them.
        """
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "from webhook_app import metrics; print(metrics.render()[0].decode())",
            ],
            env={k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        samples = parse(out)
        for outcome in (
            "recorded",
            "duplicate",
            "ignored",
            "invalid",
            "unauthorized",
            "too_large",
            "unavailable",
        ):
            assert (
                value(samples, "fivetran_events_webhook_deliveries_total", outcome=outcome) == 0.0
            ), outcome
        for outcome in ("delivered", "recovered", "retrying", "undelivered", "failed", "busy"):
            assert (
                value(samples, "fivetran_events_forward_attempts_total", outcome=outcome) == 0.0
            ), outcome


class TestConnectorFreshness:
    def test_seconds_since_success_and_last_status(self, http: Any, frozen: Any) -> None:
        """Per connector: age of the newest success, and whether the newest completion passed."""
        post_event(http, connector_id="late", sync_id="l1", created=T0 - timedelta(hours=3))
        post_event(
            http,
            connector_id="late",
            sync_id="l2",
            created=T0 - timedelta(hours=1),
            status="FAILURE_WITH_TASK",
            reason="quota",
        )
        post_event(http, connector_id="fresh", sync_id="f1", created=T0 - timedelta(minutes=10))
        post_event(
            http,
            event="sync_start",
            connector_id="starting",
            sync_id="s1",
            created=T0 - timedelta(minutes=20),
        )
        frozen.tick(30)
        samples = scrape(http)
        since = "fivetran_events_connector_seconds_since_success"
        assert series(samples, since) == {
            frozenset({("connector_id", "late")}): 3 * 3600 + 30,
            frozenset({("connector_id", "fresh")}): 600 + 30,
        }
        status = "fivetran_events_connector_last_sync_succeeded"
        assert series(samples, status) == {
            frozenset({("connector_id", "late"), ("status", "FAILURE_WITH_TASK")}): 0,
            frozenset({("connector_id", "fresh"), ("status", "SUCCESSFUL")}): 1,
        }
        assert (
            value(
                samples,
                "fivetran_events_connector_info",
                connector_id="starting",
                connector_name="ftar_pg",
                connector_type="google_cloud_postgresql",
                group_id="inappropriate_implode",
            )
            == 1
        )
        assert value(samples, "fivetran_events_seconds_since_last_webhook") == 600 + 30
        assert value(samples, "fivetran_events_gauges_up") == 1

    def test_overdue_by_each_connectors_own_schedule(
        self, settings: Settings, client: redis.Redis, frozen: Any, tmp_path: Path
    ) -> None:
        """Hourly, last success 2 h ago: 45 min past its 1 h 15 min; every 6 h: on time;
        manual: no series; an explicit objective of 30 min overrides an hourly schedule."""
        objectives = tmp_path / "objectives.toml"
        objectives.write_text("[connectors]\nstrict = 1800\n")
        app = create_app(settings.model_copy(update={"freshness_objectives_file": str(objectives)}))
        http = app.test_client()
        for cid in ("hourly", "six_hourly", "manual", "strict"):
            post_event(http, connector_id=cid, sync_id=cid, created=T0 - timedelta(hours=2))
        record_schedules(
            client,
            settings.key_prefix,
            {
                "hourly": Schedule(sync_frequency=60, schedule_type="auto"),
                "six_hourly": Schedule(sync_frequency=360, schedule_type="auto"),
                "manual": Schedule(sync_frequency=60, schedule_type="manual"),
                "strict": Schedule(sync_frequency=60, schedule_type="auto"),
            },
        )
        assert series(scrape(http), "fivetran_events_connector_overdue_seconds") == {
            frozenset({("connector_id", "hourly")}): 45 * 60,
            frozenset({("connector_id", "six_hourly")}): 0,
            frozenset({("connector_id", "strict")}): 90 * 60,
        }

    def test_a_success_after_a_failure_is_the_last_status(self, http: Any, frozen: Any) -> None:
        """Fivetran's FAILED-then-SUCCESSFUL retry of one sync: the connector is fine."""
        post_event(http, sync_id="t1", created=T0 - timedelta(minutes=5), status="FAILED")
        post_event(http, sync_id="t1", created=T0 - timedelta(minutes=4))
        samples = scrape(http)
        assert series(samples, "fivetran_events_connector_last_sync_succeeded") == {
            frozenset({("connector_id", "assimilate_seem"), ("status", "SUCCESSFUL")}): 1
        }

    def test_a_test_delivery_is_not_webhook_liveness(self, http: Any, frozen: Any) -> None:
        """Fivetran's test_event (a setup ping anyone holding one signed copy can replay)
        does not reset seconds_since_last_webhook; a sync's event does."""
        post_event(http, sync_id="old", created=T0 - timedelta(hours=2))
        raw, headers = signed(
            {
                "event": "test_event",
                "created": "2026-03-02T11:00:00.000Z",
                "connector_type": "_connector_type",
                "connector_id": "_connector_1",
                "group_id": "_destination_1",
            }
        )
        assert http.post("/webhooks/fivetran", data=raw, headers=headers).status_code == 200
        frozen.tick(45)
        since = "fivetran_events_seconds_since_last_webhook"
        assert value(scrape(http), since) == 2 * 3600 + 45


class TestProbesNameNoConnectorsUnlessAuthenticated:
    def test_metrics_without_a_token_name_no_connector(self, http: Any, frozen: Any) -> None:
        """Anyone may scrape: counts and ages, but no series naming a connector."""
        post_event(http, connector_id="secret_name", sync_id="n1", created=T0)
        for token in (None, "not-a-token"):
            samples = scrape(http, token)
            assert value(samples, "fivetran_events_gauges_up") == 1
            assert value(samples, "fivetran_events_seconds_since_last_webhook") == 0
            assert not any("connector_" in name for name, _ in samples), token
            assert not any(dict(labels).get("connector_id") for _, labels in samples)
        authenticated = scrape(http)
        assert series(authenticated, "fivetran_events_connector_seconds_since_success") == {
            frozenset({("connector_id", "secret_name")}): 0
        }


@pytest.fixture
def standin(airflow2_standin: Airflow2StandIn) -> Airflow2StandIn:
    airflow2_standin.add_dataset("fivetran://connector/known")
    return airflow2_standin


class TestDeliveryGauges:
    def test_counts_and_oldest_age_by_state(
        self, http: Any, settings: Settings, standin: Airflow2StandIn, frozen: Any
    ) -> None:
        """One delivery in each state, made by the real worker code against the stand-in."""
        fw = forwarder(
            settings, standin.url, standin.username, standin.password, airflow_api_version="2"
        )
        standin.faults.append((400, {}))
        post_event(http, connector_id="known", sync_id="refused")
        run_worker(fw)  # failed (400)
        frozen.tick(60)
        post_event(http, connector_id="nodag", sync_id="no-dag")
        run_worker(fw)  # undelivered (404)
        frozen.tick(60)
        standin.faults.append((503, {"Retry-After": "600"}))
        post_event(http, connector_id="known", sync_id="busy")
        run_worker(fw)  # retrying
        post_event(http, connector_id="known", sync_id="fine")
        run_worker(fw)  # delivered
        frozen.tick(60)
        post_event(http, connector_id="known", sync_id="queued")  # pending: no worker ran
        frozen.tick(30)
        samples = scrape(http)
        assert series(samples, "fivetran_events_forward_deliveries") == {
            frozenset({("state", s)}): 1 for s in ("pending", "retrying", "undelivered", "failed")
        }
        assert series(samples, "fivetran_events_forward_oldest_delivery_age_seconds") == {
            frozenset({("state", "failed")}): 210,
            frozenset({("state", "undelivered")}): 150,
            frozenset({("state", "retrying")}): 90,
            frozenset({("state", "pending")}): 30,
        }
        assert value(samples, "fivetran_events_forward_due_deliveries") == 2
        assert value(samples, "fivetran_events_forward_given_up_deliveries") == 2

    def test_overdue_grows_when_no_worker_sweeps(self, http: Any, frozen: Any) -> None:
        """A new delivery is due at its receipt (a woken sweeper queues it at once); past
        that, nobody took it."""
        post_event(http, sync_id="stuck")
        assert value(scrape(http), "fivetran_events_forward_overdue_seconds") == 0
        frozen.tick(75)
        samples = scrape(http)
        assert value(samples, "fivetran_events_forward_overdue_seconds") == 75
        assert (
            value(samples, "fivetran_events_forward_oldest_delivery_age_seconds", state="pending")
            == 75
        )

    def test_counts_stay_exact_and_cost_no_more_as_deliveries_grow(
        self, settings: Settings, client: redis.Redis, http: Any
    ) -> None:
        """Each state's count is exact at any size, for the same commands per scrape."""
        for i in range(3):
            post_event(http, sync_id=f"q{i}")
        gauges = RedisGauges(client, settings.key_prefix)
        before = commands_per_scrape(client, gauges)
        for i in range(3, 60):
            post_event(http, sync_id=f"q{i}")
        assert commands_per_scrape(client, gauges) == before
        snap = gauges.read()
        assert snap.counts == {"pending": 60, "retrying": 0, "undelivered": 0, "failed": 0}
        assert snap.due == 60


def commands_per_scrape(client: redis.Redis, gauges: RedisGauges) -> int:
    """Count the Redis commands one scrape sends (INFO's own excluded)."""
    before = int(client.info("stats")["total_commands_processed"])
    list(gauges.collect())
    return int(client.info("stats")["total_commands_processed"]) - before - 1


class TestCost:
    def test_commands_grow_with_connectors_not_with_history(
        self, http: Any, client: redis.Redis, settings: Settings
    ) -> None:
        """200 syncs of a connector cost a scrape what 1 does; each more connector costs
        the same few commands (its newest success, failure and running sync)."""
        post_event(http, connector_id="a", sync_id="a0", status="FAILURE")
        gauges = RedisGauges(client, settings.key_prefix)
        one = commands_per_scrape(client, gauges)
        for i in range(1, 200):
            post_event(http, connector_id="a", sync_id=f"a{i}", status="FAILURE")
        assert commands_per_scrape(client, gauges) == one
        post_event(http, connector_id="b", sync_id="b0", status="FAILURE")
        two = commands_per_scrape(client, gauges)
        post_event(http, connector_id="c", sync_id="c0", status="FAILURE")
        assert 0 < two - one == commands_per_scrape(client, gauges) - two <= 3


class TestRedisDown:
    def test_metrics_still_answer_without_redis(self, settings: Settings) -> None:
        """The gauges say they could not be read; the counters (503s among them) still show."""
        down = settings.model_copy(
            update={"redis_url": f"redis://127.0.0.1:{free_port()}/0", "redis_timeout_seconds": 1.0}
        )
        http = create_app(down).test_client()
        raw, headers = signed(payload())
        assert http.post("/webhooks/fivetran", data=raw, headers=headers).status_code == 503
        samples = scrape(http)
        assert value(samples, "fivetran_events_gauges_up") == 0
        assert (
            value(samples, "fivetran_events_webhook_deliveries_total", outcome="unavailable") or 0
        ) >= 1
        assert not series(samples, "fivetran_events_forward_deliveries")


def test_received_time_is_the_webhooks_clock(
    http: Any, client: redis.Redis, settings: Settings, frozen: Any
) -> None:
    """Ages count from the webhook's receipt (received_ms), not from Fivetran's created."""
    post_event(http, sync_id="old", created=T0 - timedelta(days=2))
    snap = RedisGauges(client, settings.key_prefix).read()
    assert snap.oldest_received == {"pending": to_ms(T0)}
