"""What forwarding leaves in Redis expires once it can no longer matter.

Real redis-server, the real Flask app, RQ and the worker's jobs; Airflow 2 is the
stand-in (testkit/airflow2_standin.py). The keep time is 2 s here (72 h by default).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from freezegun import freeze_time

from fivetran_events import Settings, parse_event
from fivetran_events.deliveries import DeliveryState, Lifetimes
from fivetran_events.history.writer import TRIM_EVERY, trims
from fivetran_events.keys import (
    deliveries_key,
    delivery_id,
    delivery_lock_key,
    delivery_state_key,
    sync_deliveries_key,
    undelivered_key,
)
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import CID, URI, forwarder, post_event, run_worker, syncs
from testkit.processes import poll_until
from testkit.support import deliver, encode, payload
from testkit.worker_process import worker_env
from webhook_app.cli import main
from webhook_app.forwarding import sweeper
from webhook_app.forwarding.forwarder import Forwarder
from webhook_app.forwarding.replay import Replayer

pytestmark = pytest.mark.timeout(60)

KEEP_S = 2.0
#: A connector no DAG uses: its deliveries end undelivered (Airflow answers 404).
UNUSED = "unused_conn"
#: RQ's registries, by the key prefix RQ gives them (rq 2.x: one ZSET per queue each).
RQ_REGISTRIES = ("finished", "started", "failed", "deferred", "scheduled")


@pytest.fixture(autouse=True)
def short_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """RQ keeps results 1 s (5 minutes in production): set before the app queues jobs."""
    monkeypatch.setattr(sweeper, "RESULT_TTL", 1)


@pytest.fixture
def fw(settings: Settings, airflow2_standin: Airflow2StandIn) -> Forwarder:
    airflow2_standin.add_dataset(URI)
    return forwarder(
        settings,
        airflow2_standin.url,
        airflow2_standin.username,
        airflow2_standin.password,
        forward_keep_delivered_hours=KEEP_S / 3600,
    )


def rq_leftovers(client: redis.Redis, queue: str) -> list[str]:
    """RQ's keys of jobs: job hashes, results, executions and registry entries."""
    keys = [k.decode() for k in client.scan_iter("rq:*")]
    registries = {f"rq:{r}:{queue}" for r in RQ_REGISTRIES}
    return sorted(
        k
        for k in keys
        if k.startswith(("rq:job:", "rq:results:", "rq:execution")) or k in registries
    )


def listed(env: dict[str, str]) -> list[str]:
    """The sync ids ``fivetran-events deliveries`` lists."""
    out = CliRunner().invoke(main, ["deliveries", "--json"], env=env)
    assert out.exit_code == 0, out.output
    return sorted(d["sync_id"] for d in json.loads(out.output)["deliveries"])


class TestExpiry:
    def test_a_delivered_record_goes_after_the_keep_time_an_undelivered_one_stays(
        self,
        http: Any,
        fw: Forwarder,
        client: redis.Redis,
        settings: Settings,
        airflow2_standin: Airflow2StandIn,
    ) -> None:
        """Delivered: record, lock, sync's set and listing entry go after the keep time,
        and a redelivery inside it forwards nothing again; RQ's jobs, results and registry
        entries go too. Undelivered (404): still listed, still replayable."""
        p = fw.settings.key_prefix
        env = worker_env(fw.settings)
        done = delivery_id(CID, "s1", URI)
        gone_404 = delivery_id(UNUSED, "u1", f"fivetran://connector/{UNUSED}")
        post_event(http, sync_id="s1")
        post_event(http, sync_id="u1", connector_id=UNUSED)
        run_worker(fw)
        d = fw.store.get(done)
        assert d is not None and d.state is DeliveryState.DELIVERED, d
        u = fw.store.get(gone_404)
        assert u is not None and u.state is DeliveryState.UNDELIVERED, u
        ttl_ms = client.pttl(fw.store.key(done))
        assert 0 < ttl_ms <= KEEP_S * 1000
        assert 0 < client.pttl(sync_deliveries_key(p, CID, "s1")) <= KEEP_S * 1000
        assert listed(env) == ["s1", "u1"]
        assert syncs(http, CID)[0]["forwarding"][0]["airflow_event_id"] == 1

        # Inside the keep time: Fivetran's retry of the same delivery, and a second
        # success under the same sync id, forward nothing again.
        post_event(http, sync_id="s1", created=datetime.now(timezone.utc) - timedelta(seconds=1))
        run_worker(fw)
        assert len(airflow2_standin.posts) == 2  # s1 once, u1's 404 once

        poll_until(lambda: not client.exists(fw.store.key(done)), "s1's record to expire", 10)
        assert not client.exists(sync_deliveries_key(p, CID, "s1"))
        assert not client.exists(delivery_lock_key(p, done))
        assert listed(env) == ["u1"]
        # The syncs listing still has both successes of s1; what was forwarded is gone.
        assert [(r["sync_id"], r["forwarding"]) for r in syncs(http, CID)] == [("s1", [])] * 2
        # What stays is what an operator acts on.
        assert client.exists(fw.store.key(gone_404))
        assert client.zscore(undelivered_key(p), gone_404) is not None
        assert client.zscore(delivery_state_key(p, "undelivered"), gone_404) is not None
        assert client.pttl(fw.store.key(gone_404)) > 47 * 3_600_000  # its retry window on

        # RQ: results expired (1 s here); a worker's maintenance (run at its start, then
        # every 10 minutes) drops the registries' entries of expired jobs.
        poll_until(
            lambda: not any(k.startswith("rq:job:") for k in rq_leftovers(client, fw.queue.name)),
            "RQ's finished jobs to expire",
            10,
        )
        run_worker(fw)
        assert rq_leftovers(client, fw.queue.name) == []

        # A replay opens a new window: the record and its sync's set live a whole one again.
        before = client.pttl(fw.store.key(gone_404))
        assert Replayer.of(fw).replay([gone_404]) == [gone_404]
        window = fw.store.get(gone_404)
        assert window is not None and window.state is DeliveryState.PENDING
        assert client.pttl(fw.store.key(gone_404)) > before
        assert client.pttl(sync_deliveries_key(p, UNUSED, "u1")) >= before
        assert client.zscore(deliveries_key(p), gone_404) == window.window_ms
        assert client.zscore(delivery_state_key(p, "pending"), gone_404) == window.window_ms

        # The listing's entry of the expired record goes at a creation past the longest
        # life a record has (the web app's settings: the 72 h default keep time), one of
        # the one in TRIM_EVERY that trims.
        assert client.zscore(deliveries_key(p), done) is not None
        life_s = Lifetimes.from_settings(settings).record_ttl_ms / 1000
        later = datetime.now(timezone.utc) + timedelta(seconds=life_s + 60)
        # A sync of its own ("s1" would re-create the expired delivery and list it again).
        trimming = next(
            body
            for i in range(1000)
            if trims(
                parse_event(encode(body := payload(sync_id=f"trim{i}", created=later))),
                TRIM_EVERY,
            )
        )
        with freeze_time(later):
            deliver(http, trimming)
        assert client.zscore(deliveries_key(p), done) is None
