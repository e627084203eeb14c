"""Partitioned asset events: one per (sync, completed day, URI), exactly once.

Real redis-server, the real Flask app, RQ's worker and real worker processes; Airflow is
the stand-in as Airflow 3.3 (testkit/airflow2_standin.py, ``airflow_version``), whose
``POST /api/v2/assets/events`` takes a ``partition_key`` as 3.3's does. Syncs end in
November 2026, a few weeks before the suite's clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryKind, DeliveryState, SyncRef
from fivetran_events.history.writer import record_many
from fivetran_events.keys import partition_turn_key
from fivetran_events.model import SOURCE_IMPORTED
from testkit.airflow2_standin import Airflow2StandIn, running_airflow2_standin
from testkit.fivetran_api import TEST_API_KEY, TEST_API_SECRET, FivetranStandIn
from testkit.forward_support import CID, URI, forwarder, post_event, run_worker
from testkit.processes import poll_until
from testkit.support import ev
from testkit.worker_process import WorkerProcess, worker_env
from webhook_app.cli import main
from webhook_app.forwarding.enqueue import partitions_uri
from webhook_app.forwarding.forwarder import Forwarder
from webhook_app.forwarding.replay import Replayer
from webhook_app.forwarding.store import target_id

pytestmark = pytest.mark.timeout(90)

GROUP = "inappropriate_implode"  # testkit.support.payload's destination_group_id
HOST = "warehouse.example.com"
ACCOUNT = f"postgres://{HOST}:5432/analytics/salesforce/account"


def day(d: int) -> str:
    return f"2026-11-{d:02d}T00:00:00"


def with_(settings: Settings, fake: Airflow2StandIn, **update: Any) -> Settings:
    """``settings`` forwarding to ``fake`` with daily partitions, and ``update``."""
    s = settings.model_copy(
        update={
            "airflow_url": fake.url,
            "airflow_username": fake.username,
            "airflow_password": fake.password,
            "partition_grain": "day",
            **update,
        }
    )
    return Settings(**{k: getattr(s, k) for k in Settings.model_fields})


@contextmanager
def webhook(settings: Settings) -> Iterator[Any]:
    """The webhook app's test client with ``settings``."""
    from webhook_app import create_app

    with create_app(settings).test_client() as c:
        yield c


@pytest.fixture
def airflow3() -> Iterator[Airflow2StandIn]:
    """The stand-in as Airflow 3.3, knowing the connector's asset."""
    with running_airflow2_standin("3.3.2") as fake:
        fake.add_dataset(URI, dags=("daily_rollup",))
        yield fake


@pytest.fixture
def psettings(settings: Settings, airflow3: Airflow2StandIn) -> Settings:
    return with_(settings, airflow3)


@pytest.fixture
def phttp(psettings: Settings) -> Iterator[Any]:
    with webhook(psettings) as c:
        yield c


@pytest.fixture
def pfw(psettings: Settings, airflow3: Airflow2StandIn) -> Forwarder:
    return forwarder(psettings, airflow3.url, airflow3.username, airflow3.password)


def partitioned(fake: Airflow2StandIn, uri: str = URI) -> dict[str, list[str]]:
    """Each sync's partition keys posted on ``uri``, sorted (deliveries go in any order)."""
    out: dict[str, list[str]] = {}
    for e in fake.events:
        if e["uri"] == uri and e["partition_key"] is not None:
            out.setdefault(e["extra"]["sync_id"], []).append(e["partition_key"])
    return {k: sorted(v) for k, v in out.items()}


def plain(fake: Airflow2StandIn, uri: str = URI) -> list[str]:
    return [
        e["extra"]["sync_id"] for e in fake.events if e["uri"] == uri and not e["partition_key"]
    ]


def history(http: Any) -> None:
    """s1 (the first success) Nov 10, s2 failed Nov 11, s3 succeeded Nov 13."""
    post_event(http, sync_id="s1", created="2026-11-10T06:00:00Z")
    post_event(http, sync_id="s2", created="2026-11-11T06:00:00Z", status="FAILURE")
    post_event(http, sync_id="s3", created="2026-11-13T02:00:00Z")


class TestForwarding:
    def test_each_success_posts_the_days_it_completed_besides_its_plain_event(
        self, phttp: Any, pfw: Forwarder, airflow3: Airflow2StandIn
    ) -> None:
        """The first success completes only the day before it; the failure completes
        nothing; the next success the days since the first's end, oldest first. Every
        POST carries its key as Airflow 3.3 takes it; the plain events carry none."""
        history(phttp)
        run_worker(pfw)
        assert plain(airflow3) == ["s1", "s3"]
        assert partitioned(airflow3) == {"s1": [day(9)], "s3": [day(10), day(11), day(12)]}
        keyed = [p for p in airflow3.posts if "partition_key" in p]
        assert len(keyed) == 4 and all(
            set(p) == {"asset_id", "extra", "partition_key"} for p in keyed
        )

    def test_redelivery_worker_rerun_and_replay_post_nothing_twice(
        self, phttp: Any, pfw: Forwarder, airflow3: Airflow2StandIn
    ) -> None:
        """Fivetran delivering again, another sweep and a replay of the sync find every
        (sync, key, URI) delivered: no second event."""
        history(phttp)
        run_worker(pfw)
        before = len(airflow3.events)
        history(phttp)  # Fivetran's retries of the same deliveries
        Replayer.of(pfw).replay(Replayer.of(pfw).deliveries_of_sync("s3"))
        run_worker(pfw)
        assert len(airflow3.events) == before == 6
        assert len(airflow3.posts) == before

    def test_a_lost_plain_post_is_not_taken_for_its_syncs_partition_event(
        self, phttp: Any, pfw: Forwarder, airflow3: Airflow2StandIn, client: redis.Redis
    ) -> None:
        """The plain event's POST died unanswered and never landed: the lookup finds the
        sync's partitioned events on the same asset, with the same extra, and must not
        count them; the plain event is posted."""
        post_event(phttp, sync_id="s1", created="2026-11-10T06:00:00Z")
        run_worker(pfw)
        plain_id = target_id(SyncRef(CID, "s1", 0), URI)
        airflow3.events[:] = [e for e in airflow3.events if e["partition_key"]]
        key = pfw.store.key(plain_id)
        client.hdel(key, "event_id")
        client.hset(
            key,
            mapping={"state": DeliveryState.PENDING.value, "inflight_ms": "1", "unknown_ms": "1"},
        )
        result = pfw.attempt(plain_id)
        assert result.outcome.value == "delivered", result
        assert plain(airflow3) == ["s1"] and partitioned(airflow3) == {"s1": [day(9)]}

    def test_the_cap_posts_the_newest_and_records_the_rest(
        self, settings: Settings, airflow3: Airflow2StandIn, client: redis.Redis
    ) -> None:
        """A gap of five days with at most two keys a sync: the two newest are posted,
        the three older ones counted on the partitions delivery."""
        s = with_(settings, airflow3, partition_max_keys=2)
        with webhook(s) as http:
            post_event(http, sync_id="s1", created="2026-11-05T06:00:00Z")
            post_event(http, sync_id="s2", created="2026-11-10T06:00:00Z")
        fw = forwarder(s, airflow3.url, airflow3.username, airflow3.password)
        run_worker(fw)
        assert partitioned(airflow3)["s2"] == [day(8), day(9)]
        d = fw.store.get(target_id(SyncRef(CID, "s2", 0), partitions_uri(CID)))
        assert d is not None and d.get("partitions_skipped") == "3"
        assert json.loads(d.get("partitions") or "[]") == [day(8), day(9)]

    def test_an_import_never_creates_partitions(
        self, psettings: Settings, pfw: Forwarder, client: redis.Redis
    ) -> None:
        """``import --forward`` forwards the plain events only: an imported success makes
        no partitions delivery."""
        imported = replace(ev(sync_id="s9", created="2026-11-10T06:00:00Z"), source=SOURCE_IMPORTED)
        written = record_many(
            client,
            psettings.key_prefix,
            [imported],
            psettings.retention_ms,
            on_success=pfw.enqueuer,
        )
        assert [status.value for _, status in written] == ["recorded"]
        kinds = {
            d.kind
            for d in (pfw.store.get(i) for i in Replayer.of(pfw).deliveries_of_sync("s9"))
            if d
        }
        assert kinds == {DeliveryKind.ASSET}


class TestTables:
    @pytest.mark.parametrize(("granularity", "kinds"), [("table", []), ("both", ["partitions"])])
    def test_the_connectors_partitions_only_where_its_asset_is_forwarded(
        self, settings: Settings, airflow3: Airflow2StandIn, granularity: str, kinds: list[str]
    ) -> None:
        """Under table granularity the connector's asset gets no event, so no partitions
        either: each consumed table's come with the table expansion."""
        s = with_(settings, airflow3, asset_granularity=granularity)
        fw = forwarder(s, airflow3.url, airflow3.username, airflow3.password)
        _, args = fw.enqueuer(ev(sync_id="s1", created="2026-11-10T06:00:00Z"))
        made = [a for a in args if a in {k.value for k in DeliveryKind}]
        assert [k for k in made if k == "partitions"] == kinds

    def test_each_consumed_table_gets_its_partitions(
        self, settings: Settings, airflow3: Airflow2StandIn, api: FivetranStandIn
    ) -> None:
        """With FIVETRAN_EVENTS_ASSET_GRANULARITY=both a table with an asset in Airflow gets
        the plain event and a partitioned one per completed day, as the connector does."""
        api.connector(CID, group_id=GROUP)
        api.tables(CID, {"salesforce": ["account", "lead"]})
        api.destination(GROUP, "postgres_warehouse", host=HOST, port=5432, database="analytics")
        airflow3.add_dataset(ACCOUNT, dags=("accounts_daily",))
        s = with_(
            settings,
            airflow3,
            asset_granularity="both",
            fivetran_api_url=api.url,
            fivetran_api_key=TEST_API_KEY,
            fivetran_api_secret=TEST_API_SECRET,
        )
        with webhook(s) as http:
            history(http)
        run_worker(forwarder(s, airflow3.url, airflow3.username, airflow3.password))
        want = {"s1": [day(9)], "s3": [day(10), day(11), day(12)]}
        assert partitioned(airflow3, ACCOUNT) == want == partitioned(airflow3, URI)
        assert plain(airflow3, ACCOUNT) == ["s1", "s3"]
        table_events = [e for e in airflow3.events if e["uri"] == ACCOUNT]
        assert all(e["extra"]["table"] == "account" for e in table_events)


class TestOlderAirflow:
    @pytest.mark.parametrize("version", ["3.1.5", "2.10.5"])
    def test_the_worker_refuses_to_start_naming_the_version(
        self, settings: Settings, version: str
    ) -> None:
        with running_airflow2_standin(version) as fake:
            env = worker_env(with_(settings, fake), partition_grain="day")
            exe = Path(sys.executable).parent / "fivetran-events"
            done = subprocess.run(
                [str(exe), "worker", "--burst", "--concurrency", "1"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
        assert done.returncode != 0
        assert f"runs Airflow {version}" in done.stderr, done.stderr
        assert "FIVETRAN_EVENTS_PARTITION_GRAIN" in done.stderr

    def test_a_partitions_delivery_fails_naming_the_version_when_start_up_could_not_ask(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """Airflow was down when the worker started; the first partitions delivery asks,
        and fails visibly instead of posting keys a 3.1 would refuse."""
        with running_airflow2_standin("3.1.5") as fake:
            fake.add_dataset(URI)
            s = with_(settings, fake)
            with webhook(s) as http:
                post_event(http, sync_id="s1", created="2026-11-10T06:00:00Z")
            fw = forwarder(s, fake.url, fake.username, fake.password)
            run_worker(fw)
            d = fw.store.get(target_id(SyncRef(CID, "s1", 0), partitions_uri(CID)))
            assert d is not None and d.state is DeliveryState.FAILED
            assert "runs Airflow 3.1.5" in (d.get("reason") or "")
            assert [e["partition_key"] for e in fake.events] == [None]  # the plain event


@pytest.mark.slow
class TestKilledWorker:
    def test_a_worker_killed_mid_post_leaves_one_event_per_key(
        self, phttp: Any, psettings: Settings, airflow3: Airflow2StandIn, tmp_path: Path
    ) -> None:
        """SIGKILL while Airflow holds the POST of one partition: the next worker waits
        out the lease, finds that key's event and records it (no second POST), and posts
        the rest."""
        airflow3.hold_syncs[f"s3 {day(11)}"] = 1.0
        opts = {
            "args": ("--concurrency", "1"),
            "partition_grain": "day",
            "airflow_timeout_seconds": 1,
            "forward_lease_seconds": 5,
            "forward_unknown_outcome_seconds": 0,
        }
        history(phttp)
        first = WorkerProcess(psettings, tmp_path, "first", **opts)  # type: ignore[arg-type]
        try:
            poll_until(lambda: airflow3.uncommitted == 1, "the held POST", 30, 0.02, first.log)
            first.kill()
        finally:
            first.stop()
        with WorkerProcess(psettings, tmp_path, "second", **opts) as second:  # type: ignore[arg-type]
            poll_until(
                lambda: (
                    partitioned(airflow3).get("s3") is not None
                    and len(partitioned(airflow3)["s3"]) == 3
                    and len(plain(airflow3)) == 2
                ),
                "every event",
                60,
                details=second.log,
            )
            fw = forwarder(psettings, airflow3.url, airflow3.username, airflow3.password)
            held = target_id(SyncRef(CID, "s3", 0), URI, day(11))
            poll_until(
                lambda: (
                    (d := fw.store.get(held)) is not None and d.state is DeliveryState.DELIVERED
                ),
                "the held key recorded",
                60,
                details=second.log,
            )
        d = fw.store.get(held)
        assert d is not None and d.get("recovered") == "1", d
        assert partitioned(airflow3)["s3"] == [day(10), day(11), day(12)]
        held_posts = [p for p in airflow3.posts if p.get("partition_key") == day(11)]
        assert len(held_posts) == 1

    def test_a_keyed_post_waits_for_its_keys_turn(
        self, phttp: Any, settings: Settings, airflow3: Airflow2StandIn, client: redis.Redis
    ) -> None:
        """Another attempt holds day 9's turn and never lets go: the keyed POST waits for it
        the Airflow timeout (1 s), then goes; the plain event is posted beside it."""
        s = with_(settings, airflow3, airflow_timeout_seconds=1)
        fw = forwarder(s, airflow3.url, airflow3.username, airflow3.password)
        other = client.lock(partition_turn_key(s.key_prefix, day(9)), timeout=60)
        assert other.acquire(blocking=False)
        post_event(phttp, sync_id="s1", created="2026-11-10T06:00:00Z")
        sync = SyncRef(CID, "s1", 0)
        assert fw.attempt(target_id(sync, partitions_uri(CID))).outcome.value == "delivered"
        took = {}
        for name, did in (("plain", target_id(sync, URI)), ("keyed", target_id(sync, URI, day(9)))):
            t0 = time.monotonic()
            assert fw.attempt(did).outcome.value == "delivered", name
            took[name] = time.monotonic() - t0
        # redis-py's lock polls every 0.1 s and stops at the last poll before the timeout.
        assert took["keyed"] >= 0.85, took
        assert plain(airflow3) == ["s1"] and partitioned(airflow3) == {"s1": [day(9)]}
        assert client.get(partition_turn_key(s.key_prefix, day(9))) == other.local.token


class TestReplay:
    def run(self, env: dict[str, str], *args: str) -> Any:
        return CliRunner().invoke(main, ["replay", *args], env=env)

    def test_posts_the_days_since_a_date_once_and_says_which(
        self, http: Any, psettings: Settings, pfw: Forwarder, airflow3: Airflow2StandIn
    ) -> None:
        """Syncs recorded while partitions were off: ``replay --partitions --since`` queues
        the days from that date on that the history completed, says which, and a second
        run queues nothing new."""
        history(http)  # the suite's webhook: partitions off
        post_event(http, sync_id="s4", created="2026-11-16T01:00:00Z")
        env = worker_env(psettings, partition_grain="day")
        out = self.run(env, "--partitions", "--since", "2026-11-11")
        assert out.exit_code == 0, out.output
        assert "queued 5 new and 0 replayed partitioned deliveries" in out.output
        assert f"{CID}: 5 keys, {day(11)} to {day(15)}" in out.output
        run_worker(pfw)
        assert partitioned(airflow3) == {
            "s3": [day(11), day(12)],
            "s4": [day(13), day(14), day(15)],
        }
        again = self.run(env, "--partitions", "--since", "2026-11-11", "--json")
        assert json.loads(again.output) == {
            "since": "2026-11-11T00:00:00.000Z",
            "created": 0,
            "replayed": 0,
            "already_delivered": 5,
            "keys": {CID: [day(11), day(12), day(13), day(14), day(15)]},
        }
        run_worker(pfw)
        assert len([e for e in airflow3.events if e["partition_key"]]) == 5

    def test_needs_since_and_the_grain(self, psettings: Settings) -> None:
        env = worker_env(psettings, partition_grain="day")
        no_since = self.run(env, "--partitions", "--all-undelivered")
        assert no_since.exit_code == 2 and "--partitions needs --since" in no_since.output
        off = self.run(worker_env(psettings), "--partitions", "--since", "2026-11-11")
        assert off.exit_code == 2 and "FIVETRAN_EVENTS_PARTITION_GRAIN" in off.output
