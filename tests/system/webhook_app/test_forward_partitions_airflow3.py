"""Partitioned asset events on a real Airflow 3.3 (testkit/airflow_harness.py).

testkit/airflow_dags/fivetran_partitions.py holds the consumers: ``daily_part_a`` (a
``PartitionedAssetTimetable`` with ``StartOfDayMapper`` on connector part_a),
``daily_both`` (part_a & part_b) and ``plain_part_a`` (an asset schedule on part_a).
Real webhook, worker process and Redis; syncs end in November 2026.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryKind, Field
from testkit.airflow_harness import AirflowServer
from testkit.forward_support import forwarder, post_event
from testkit.processes import poll_until
from testkit.worker_process import WorkerProcess

from .forwarding import start_worker, uri

pytestmark = pytest.mark.timeout(480)

A, B = "part_a", "part_b"


@pytest.fixture
def psettings(af_settings: Settings) -> Settings:
    return af_settings.model_copy(update={"partition_grain": "day"})


@pytest.fixture
def phttp(psettings: Settings) -> Iterator[Any]:
    from webhook_app import create_app

    with create_app(psettings).test_client() as c:
        yield c


def run_keys(airflow3: AirflowServer, dag_id: str) -> Counter[str | None]:
    """How many runs ``dag_id`` has per partition key (None: a plain run)."""
    rows = airflow3.query("select partition_key from dag_run where dag_id=%s", dag_id)
    return Counter(r[0] for r in rows)


def nov(*days: int) -> Counter[str | None]:
    return Counter(f"2026-11-{d:02d}" for d in days)


class TestPartitionedDags:
    def test_daily_dags_run_once_per_completed_day_and_plain_ones_once_per_sync(
        self,
        phttp: Any,
        psettings: Settings,
        airflow3: AirflowServer,
        workers: list[WorkerProcess],
        tmp_path: Path,
    ) -> None:
        """part_a: s1 Nov 10 (first: completes Nov 9), a failure Nov 11, s3 Nov 13 (Nov 10
        to 12); part_b: t1 Nov 11 (Nov 10), t2 Nov 12 (Nov 11). daily_part_a runs for
        Nov 9 to 12 once each, daily_both only for Nov 10 and 11, plain_part_a once per
        success of part_a; Fivetran redelivering s3 changes nothing."""
        airflow3.wait_for_parsed("daily_part_a", "daily_both", "plain_part_a")
        airflow3.wait_for_asset(uri(A))
        airflow3.wait_for_asset(uri(B))
        workers.append(start_worker(psettings, tmp_path, partition_grain="day"))
        fw = forwarder(psettings, airflow3.url, airflow3.username, airflow3.password)

        def wait_runs(dag_id: str, want: Counter[str | None]) -> None:
            poll_until(
                lambda: run_keys(airflow3, dag_id) == want,
                f"{dag_id}'s runs {dict(want)}",
                120,
                details=lambda: (
                    f"runs: {dict(run_keys(airflow3, dag_id))}\nevents: "
                    f"{[e.get('partition_key') for e in airflow3.asset_events(uri(A))]}\n"
                    f"deliveries: {[d.to_dict() for d in fw.store.recent(50, None)]}\n"
                    f"worker: {workers[0].log()[-3000:]}\n{airflow3.logs(tail=30)}"
                ),
            )

        # One sync at a time: two plain events milliseconds apart may make one run.
        post_event(phttp, connector_id=A, sync_id="s1", created="2026-11-10T06:00:00Z")
        wait_runs("plain_part_a", Counter({None: 1}))
        wait_runs("daily_part_a", nov(9))
        post_event(
            phttp, connector_id=A, sync_id="s2", created="2026-11-11T06:00:00Z", status="FAILURE"
        )
        post_event(phttp, connector_id=B, sync_id="t1", created="2026-11-11T05:00:00Z")
        post_event(phttp, connector_id=B, sync_id="t2", created="2026-11-12T04:00:00Z")
        # part_b's keyed events land before part_a's: this test pins the runs, and
        # TestKeyedEventsAtOnce the turns keyed POSTs take for Airflow's sake.
        poll_until(
            lambda: len([e for e in airflow3.asset_events(uri(B)) if e.get("partition_key")]) == 2,
            "part_b's two keyed events",
            120,
        )
        s3 = {"connector_id": A, "sync_id": "s3", "created": "2026-11-13T02:00:00Z"}
        post_event(phttp, **s3)
        wait_runs("daily_part_a", nov(9, 10, 11, 12))
        wait_runs("plain_part_a", Counter({None: 2}))
        wait_runs("daily_both", nov(10, 11))

        assert post_event(phttp, **s3)["status"] == "duplicate"
        keyed = [e for e in airflow3.asset_events(uri(A)) if e.get("partition_key")]
        assert sorted(e["partition_key"] for e in keyed) == [
            f"2026-11-{d:02d}T00:00:00" for d in (9, 10, 11, 12)
        ]
        assert run_keys(airflow3, "daily_part_a") == nov(9, 10, 11, 12)
        assert run_keys(airflow3, "daily_both") == nov(10, 11)
        assert run_keys(airflow3, "plain_part_a") == Counter({None: 2})


class TestKeyedEventsAtOnce:
    def test_two_assets_events_of_one_key_posted_together_run_their_and_once(
        self, phttp: Any, psettings: Settings, airflow3: AirflowServer
    ) -> None:
        """part_c and part_d each complete Aug 31 to Sep 8; two forwarders post each day's
        two keyed events at the same instant (a barrier). ``daily_cd`` (part_c & part_d)
        runs once for every day: without the partition key's turn, Airflow gave about half
        of such pairs two pending runs, neither of which ever ran (docs/partitions.md)."""
        airflow3.wait_for_parsed("daily_cd")
        fws = [
            forwarder(psettings, airflow3.url, airflow3.username, airflow3.password)
            for _ in range(2)
        ]
        keyed: dict[str, dict[str, str]] = {}  # connector -> partition key -> delivery
        for cid in ("part_c", "part_d"):
            airflow3.wait_for_asset(uri(cid))
            post_event(phttp, connector_id=cid, sync_id="r1", created="2026-09-01T06:00:00Z")
            post_event(phttp, connector_id=cid, sync_id="r2", created="2026-09-09T06:00:00Z")
            for ds in fws[0].store.for_syncs(cid, ["r1", "r2"]).values():
                for d in ds:
                    if d.kind is DeliveryKind.PARTITIONS:
                        fws[0].attempt(d.id)  # creates the sync's keyed deliveries
            keyed[cid] = {
                str(d.get(Field.PARTITION_KEY)): d.id
                for ds in fws[0].store.for_syncs(cid, ["r1", "r2"]).values()
                for d in ds
                if d.get(Field.PARTITION_KEY)
            }
        days = sorted(keyed["part_c"])
        assert days == sorted(keyed["part_d"]) and len(days) == 9, keyed

        together = threading.Barrier(2)  # reusable: it lets each day's pair go at once

        def attempt(i: int, did: str) -> None:
            together.wait()
            fws[i].attempt(did)

        for day in days:
            threads = [
                threading.Thread(target=attempt, args=(i, keyed[cid][day]))
                for i, cid in enumerate(("part_c", "part_d"))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
        want = Counter(day[:10] for day in days)
        pending_sql = (
            "select partition_key from asset_partition_dag_run "
            "where target_dag_id=%s and created_dag_run_id is null"
        )
        poll_until(
            lambda: run_keys(airflow3, "daily_cd") == want,
            f"daily_cd's runs {dict(want)}",
            120,
            details=lambda: (
                f"runs: {dict(run_keys(airflow3, 'daily_cd'))}\n"
                f"pending: {airflow3.query(pending_sql, 'daily_cd')}"
            ),
        )
