"""``fivetran-events reconcile`` and what shows it: history, connectors, /readyz, /metrics.

Real parts: the suite's Redis, the webhook app (Flask's test client: the deliveries are
signed and go through the whole app), Fivetran's REST API stand-in on 127.0.0.1, the
CLI through click's runner, and the delivery records the webhook's forwarding hook
creates (one per sync and dataset URI).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from prometheus_client import REGISTRY
from rq import Queue
from rq.registry import ScheduledJobRegistry

from fivetran_events import Settings
from fivetran_events.model import derived_sync_id
from fivetran_events.timeutil import to_ms
from testkit.fivetran_api import TEST_API_KEY, TEST_API_SECRET, FivetranStandIn
from testkit.forward_support import syncs
from testkit.support import TOKEN, deliver, payload
from testkit.worker_process import worker_env
from webhook_app.cli import ExitCode, main
from webhook_app.forwarding.store import delivery_store
from webhook_app.worker import schedule
from webhook_app.worker.queue import forward_queue

#: The read API's token: probes then name connectors and webhooks.
AUTH = {"Authorization": f"Bearer {TOKEN}"}

CONN = "rebuild_ogre"
API_KEY, API_SECRET = TEST_API_KEY, TEST_API_SECRET
#: A success an hour ago (inside any retention), to the millisecond.
ENDED = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
SID = "0b8a3c2e-4b5d-4e6f-8a7b-1c2d3e4f5a6b"


def cli(env: dict[str, str], *args: str) -> Result:
    result = CliRunner().invoke(main, list(args), env=env)
    assert API_SECRET not in result.output
    return result


def reconciled(env: dict[str, str]) -> dict[str, Any]:
    out = cli(env, "reconcile", "--json")
    assert out.exit_code == 0, out.output
    body: dict[str, Any] = json.loads(out.stdout)
    return body


def counted(connector: str) -> float:
    value = REGISTRY.get_sample_value("fivetran_events_reconciled_total", {"connector": connector})
    return value or 0.0


def inactive_webhook(api: FivetranStandIn) -> None:
    api.webhooks["w9"] = {
        "id": "w9",
        "type": "account",
        "url": "https://events.example.com/webhooks/fivetran",
        "events": ["sync_end"],
        "active": False,
        "secret": "s",
    }


class TestReconcile:
    def test_a_missed_success_is_recorded_forwarded_once_and_shown_reconciled(
        self,
        env: dict[str, str],
        api: FivetranStandIn,
        settings: Settings,
        client: redis.Redis,
        http: Any,
    ) -> None:
        api.connector(CONN, succeeded_at=ENDED)
        before = counted(CONN)
        body = reconciled(env)
        derived = derived_sync_id(CONN, to_ms(ENDED))
        assert (body["connections"], body["recorded"], body["known"]) == (1, 1, 0)
        assert body["reconciled"] == [
            {
                "connector_id": CONN,
                "sync_id": derived,
                "status": "SUCCESSFUL",
                "ended_at": body["reconciled"][0]["ended_at"],
            }
        ]
        assert counted(CONN) == before + 1
        store = delivery_store(settings, client)
        assert len(store.for_syncs(CONN, [derived])[derived]) == 1  # one dataset URI
        again = reconciled(env)
        assert (again["recorded"], again["known"]) == (0, 1)
        assert counted(CONN) == before + 1
        assert len(store.for_syncs(CONN, [derived])[derived]) == 1
        text = cli(env, "history", CONN)
        assert f"{derived} (derived) (reconciled)" in text.output, text.output
        rows = json.loads(cli(env, "history", CONN, "--json").output)["syncs"]
        assert [r.get("source") for r in rows] == ["reconciled"]
        assert [r.get("source") for r in syncs(http, CONN)] == ["reconciled"]  # the read API

    def test_a_missed_sync_before_the_latest_is_recovered_from_the_sync_history(
        self, env: dict[str, str], api: FivetranStandIn, settings: Settings, client: redis.Redis
    ) -> None:
        """Two syncs the webhook missed: the connection list reports the latter only, the
        sync history both, each forwarded once under its own sync id."""
        api.connector(CONN)
        ids = [SID, SID.replace("0b8a", "1c9b")]
        for sync_id, ended in zip(ids, (ENDED - timedelta(minutes=30), ENDED), strict=True):
            api.past_sync(CONN, sync_id, ended - timedelta(minutes=5), ended)
        body = reconciled(env)
        assert [r["sync_id"] for r in body["reconciled"]] == ids
        assert (body["recorded"], body["sync_histories"]) == (2, 1)
        store = delivery_store(settings, client)
        assert {k: len(v) for k, v in store.for_syncs(CONN, ids).items()} == dict.fromkeys(ids, 1)
        again = reconciled(env)
        assert (again["recorded"], again["known"], again["sync_histories"]) == (0, 1, 0)
        out = cli(env, "reconcile", "--no-forward")
        assert "0 sync histories read" in out.output, out.output

    def test_the_webhooks_late_delivery_is_a_duplicate_and_forwards_nothing(
        self,
        env: dict[str, str],
        api: FivetranStandIn,
        settings: Settings,
        client: redis.Redis,
        http: Any,
    ) -> None:
        api.connector(CONN, succeeded_at=ENDED)
        reconciled(env)
        late = payload("sync_end", CONN, ENDED + timedelta(seconds=2), sync_id=SID)
        assert deliver(http, late)["status"] == "duplicate"
        assert delivery_store(settings, client).for_syncs(CONN, [SID]) == {SID: []}

    def test_a_delivered_success_is_known(
        self, env: dict[str, str], api: FivetranStandIn, http: Any
    ) -> None:
        deliver(http, payload("sync_end", CONN, ENDED - timedelta(seconds=3), sync_id=SID))
        api.connector(CONN, succeeded_at=ENDED)
        body = reconciled(env)
        assert (body["recorded"], body["known"]) == (0, 1)

    def test_text_output_names_what_it_recorded(
        self, env: dict[str, str], api: FivetranStandIn
    ) -> None:
        api.connector(CONN, succeeded_at=ENDED, failed_at=ENDED - timedelta(hours=2))
        out = cli(env, "reconcile", "--no-forward")
        assert out.exit_code == 0, out.output
        assert "Reconciled 1 connections: 2 recorded (reconciled), 0 already known" in out.output
        assert out.stdout.count(CONN) == 2

    def test_without_an_api_key_it_says_what_to_set(self, settings: Settings) -> None:
        out = cli(worker_env(settings), "reconcile")
        assert out.exit_code == ExitCode.USAGE, out.output
        assert "FIVETRAN_EVENTS_FIVETRAN_API_KEY" in out.output

    def test_fivetran_unreachable_is_a_clean_error_that_records_nothing(
        self, env: dict[str, str], api: FivetranStandIn, client: redis.Redis
    ) -> None:
        api.connector(CONN, succeeded_at=ENDED)
        api.fail_next(10, status=503, retry_after=None)
        out = cli(env, "reconcile")
        assert out.exit_code == ExitCode.UNREACHABLE, out.output
        assert "Traceback" not in out.output
        assert client.keys("test:h:*") == []


class TestInactiveWebhook:
    def test_shown_by_readyz_connectors_and_metrics(
        self, env: dict[str, str], api: FivetranStandIn, http: Any
    ) -> None:
        assert "fivetran" not in http.get("/readyz").get_json()  # before any reconcile
        inactive_webhook(api)
        api.connector(CONN, succeeded_at=ENDED)
        assert [w["id"] for w in reconciled(env)["inactive_webhooks"]] == ["w9"]
        ready = http.get("/readyz", headers=AUTH)
        assert ready.status_code == 200  # this server is ready: Fivetran is not sending
        side = ready.get_json()["fivetran"]
        assert [w["id"] for w in side["inactive_webhooks"]] == ["w9"]
        assert side["reconciled_at"] and side["inactive_webhook_count"] == 1
        # Without the read API's token: how many, not which (ids, groups, URLs).
        anonymous = http.get("/readyz").get_json()["fivetran"]
        assert anonymous == {"reconciled_at": side["reconciled_at"], "inactive_webhook_count": 1}
        text = cli(env, "connectors")
        assert (
            "Fivetran reports webhook w9 (https://events.example.com/webhooks/fivetran) INACTIVE"
            in text.output
        )
        listed = json.loads(cli(env, "connectors", "--json").output)
        assert [w["id"] for w in listed["fivetran"]["inactive_webhooks"]] == ["w9"]
        resp = http.get("/api/connectors", headers=AUTH)
        assert resp.status_code == 200, resp.get_json()
        assert [w["id"] for w in resp.get_json()["fivetran"]["inactive_webhooks"]] == ["w9"]
        metrics = http.get("/metrics", headers=AUTH).get_data(as_text=True)
        assert "fivetran_events_fivetran_inactive_webhooks 1.0" in metrics
        series = 'fivetran_events_fivetran_webhooks_inactive{url="%s",webhook_id="w9"} 1.0'
        assert series % "https://events.example.com/webhooks/fivetran" in metrics
        assert "fivetran_events_seconds_since_reconcile" in metrics
        anonymous_metrics = http.get("/metrics").get_data(as_text=True)
        assert "fivetran_events_fivetran_inactive_webhooks 1.0" in anonymous_metrics
        assert "w9" not in anonymous_metrics

    def test_reactivated_it_is_gone(
        self, env: dict[str, str], api: FivetranStandIn, http: Any
    ) -> None:
        inactive_webhook(api)
        reconciled(env)
        api.webhooks["w9"]["active"] = True
        reconciled(env)
        assert http.get("/readyz", headers=AUTH).get_json()["fivetran"]["inactive_webhooks"] == []
        assert "fivetran_events_fivetran_inactive_webhooks 0.0" in http.get("/metrics").get_data(
            as_text=True
        )


class TestOverdue:
    def test_reconciled_schedules_mark_overdue_connectors_everywhere(
        self, env: dict[str, str], api: FivetranStandIn, http: Any
    ) -> None:
        """Last success an hour ago: every 15 minutes is 30 min overdue, hourly on time,
        manual has no objective; the CLI (text, --json), the API and /metrics say so."""
        ended = datetime.now(timezone.utc) - timedelta(hours=1)  # ENDED is the module's
        api.connector(CONN, succeeded_at=ended, schedule_type="auto", sync_frequency=15)
        api.connector("hourly_one", succeeded_at=ended, schedule_type="auto", sync_frequency=60)
        api.connector("manual_one", succeeded_at=ended)
        reconciled(env)
        listed = json.loads(cli(env, "connectors", "--json").stdout)
        got = {
            c["connector_id"]: (c["overdue"], c["overdue_seconds"]) for c in listed["connectors"]
        }
        late, seconds = got.pop(CONN)
        assert late is True and 30 * 60 <= seconds < 31 * 60
        assert got == {"hourly_one": (False, 0), "manual_one": (False, None)}
        rows = {line.split()[0]: line for line in cli(env, "connectors").stdout.splitlines()}
        assert " 30m" in rows[CONN] and " no " in rows["hourly_one"]
        resp = http.get("/api/connectors", headers=AUTH)
        answer = {c["connector_id"]: c for c in resp.get_json()["connectors"]}
        assert answer[CONN]["overdue"] is True and answer[CONN]["schedule"]["sync_frequency"] == 15
        assert answer["manual_one"]["due_at"] is None
        metrics = http.get("/metrics", headers=AUTH).get_data(as_text=True)
        assert f'fivetran_events_connector_overdue_seconds{{connector_id="{CONN}"}} 18' in metrics
        assert 'fivetran_events_connector_overdue_seconds{connector_id="hourly_one"} 0.0' in metrics
        assert 'overdue_seconds{connector_id="manual_one"}' not in metrics


def scheduled(queue: Queue) -> ScheduledJobRegistry:
    return ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]


class TestSchedule:
    def test_one_schedule_per_period_whatever_the_workers(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        s = settings.model_copy(
            update={"fivetran_api_key": "k", "fivetran_api_secret": "s", "reconcile_minutes": 1}
        )
        queue = forward_queue(s, client)
        now = to_ms(ENDED) // 60_000 * 60_000 + 10_000  # 10 s into a period
        assert schedule.schedule_next(s, queue, now) is True
        assert schedule.schedule_next(s, queue, now + 20_000) is False  # a second worker
        assert schedule.schedule_next(s, queue, now + 60_000) is True  # the next period
        ids = scheduled(queue).get_job_ids()
        first = (now // 60_000) + 1
        assert sorted(ids) == [
            schedule.reconcile_job_id(s, first),
            schedule.reconcile_job_id(s, first + 1),
        ]

    @pytest.mark.parametrize(
        ("update", "on"),
        [
            ({}, False),
            ({"fivetran_api_key": "k", "fivetran_api_secret": "s"}, True),
            ({"fivetran_api_key": "k", "fivetran_api_secret": "s", "reconcile_minutes": 0}, False),
        ],
    )
    def test_on_only_with_a_key_and_a_period(
        self,
        settings: Settings,
        client: redis.Redis,
        update: dict[str, Any],
        on: bool,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        s = settings.model_copy(update=update)
        queue = forward_queue(s, client)
        with caplog.at_level("INFO", logger="webhook_app.worker.schedule"):
            assert schedule.start_schedule(s, queue) is on
        assert len(scheduled(queue)) == (1 if on else 0)
        said = [r.getMessage() for r in caplog.records if "not reconciling" in r.getMessage()]
        assert len(said) == (0 if on else 1), said


def test_readyz_stays_ready_when_the_detail_cannot_be_read(
    http: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis took the probe's write, then failed the detail's read: ready, without it."""
    from webhook_app import probes

    def fails(client: redis.Redis, prefix: str) -> None:
        raise redis.ConnectionError("gone")

    monkeypatch.setattr(probes, "fivetran_side", fails)
    resp = http.get("/readyz")
    assert resp.status_code == 200 and resp.get_json() == {"status": "ready"}
