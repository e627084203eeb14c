"""The fault reconcile closes: the webhook is down longer than Fivetran retries while syncs succeed.

Real parts: the webhook app under gunicorn, the suite's Redis, a real ``fivetran-events
worker`` process (a pool of 4, RQ's scheduler on, reconciling every 3 s), Fivetran's REST
API stand-in (it plays Fivetran: each sync's end moves the connection's ``succeeded_at``
and is POSTed, signed, to the webhook; during the outage the POST finds no server and is
never retried, as after Fivetran's 24 h) and the Airflow 2 REST stand-in the worker
forwards to.

Each sync is also in the connection's sync history (the stand-in's endpoint): a run
whose connection list reports a completion the history lacks reads it and recovers every
sync since, each with its own id. Here each round of the outage ends one sync per
connector, and the next round starts once a run recorded them (the worker's period
bounds the wait). The test checks that every success is then in the history, each
forwarded once (one Airflow event per sync and dataset URI), that the sensor's decisions
over a calendar of targets equal those of a history that got every delivery, and that
two syncs of one connector between two runs are both recovered.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr
from pytest_redis.executor import RedisExecutor

from fivetran_events import HistoryReader, HistoryWriter, Settings
from fivetran_events.keys import ConnectorKeys
from fivetran_events.model import parse_event
from fivetran_events.reconcile import last_outcome
from fivetran_events.timeutil import iso, parse_iso, to_ms
from testkit.airflow2_standin import Airflow2StandIn
from testkit.fivetran_api import FivetranStandIn, serving
from testkit.forward_support import forwarder
from testkit.processes import poll_until
from testkit.servers import webhook_server
from testkit.support import SECRET, encode, payload
from testkit.worker_process import WorkerProcess

CONNECTORS = ("orders_pg", "billing_sf", "crm_api")
API_KEY, API_SECRET = "ft-key", "ft-api-secret-for-tests"
#: Minutes between the worker's reconciles (3 s).
PERIOD_MIN = 0.05
#: Syncs per connector delivered before the outage, and ended during it.
BEFORE, DURING = 3, 4
#: Fivetran's syncs of one connector are this far apart (more than the same-sync window).
EVERY = timedelta(minutes=10)
DURATION = timedelta(minutes=4)
BASE = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(hours=6)


def uri(cid: str) -> str:
    return f"fivetran://connector/{cid}"


def end_of(i: int, k: int) -> datetime:
    """The end of connector ``i``'s ``k``-th sync (the connectors are a minute apart)."""
    return BASE + k * EVERY + timedelta(minutes=i)


def sync_id(cid: str, k: int) -> str:
    return f"{cid}-s{k}"


@pytest.fixture
def fivetran() -> Iterator[FivetranStandIn]:
    with serving(FivetranStandIn(api_key=API_KEY, api_secret=API_SECRET)) as api:
        for cid in CONNECTORS:
            api.connector(cid)
        yield api


def successes(client: redis.Redis, cid: str) -> list[int]:
    rows = client.zrange(ConnectorKeys("test:", cid).ok, 0, -1, withscores=True)
    return [int(row[1]) for row in rows]


def play_sync(
    fivetran: FivetranStandIn, reference: HistoryWriter, url: str | None, i: int, k: int
) -> bool:
    """Fivetran runs connector ``i``'s sync ``k``: its start and end go to the webhook
    (None: down), the reference history gets both; return whether the webhook took them."""
    cid = CONNECTORS[i]
    end = end_of(i, k)
    events = [
        payload("sync_start", cid, end - DURATION, sync_id=sync_id(cid, k)),
        payload("sync_end", cid, end, sync_id=sync_id(cid, k)),
    ]
    for body in events:
        reference.record(parse_event(encode(body)))
    fivetran.past_sync(cid, sync_id(cid, k), end - DURATION, end)
    if url is None:
        return False
    return all(fivetran.send(url, body, SECRET).status == 200 for body in events)


def decisions(reader: HistoryReader, now: int) -> list[tuple[str, int, str, int | None]]:
    """The sensor's decision for every connector at a target every 2 minutes."""
    out = []
    first = BASE - timedelta(minutes=15)
    for cid in CONNECTORS:
        for n in range(((BEFORE + DURING) * EVERY + timedelta(minutes=30)) // timedelta(minutes=2)):
            target = first + n * timedelta(minutes=2)
            d = reader.decide(cid, target, now=now)
            ended = getattr(d.sync, "ended_ms", None)
            out.append((cid, to_ms(target), d.outcome.value, ended))
    return out


@pytest.mark.slow
def test_reconcile_recovers_what_an_outage_lost(
    redis_proc: RedisExecutor,
    settings: Settings,
    client: redis.Redis,
    fivetran: FivetranStandIn,
    airflow2_standin: Airflow2StandIn,
    tmp_path: Path,
) -> None:
    for cid in CONNECTORS:
        airflow2_standin.add_dataset(uri(cid))
    fw = forwarder(
        settings, airflow2_standin.url, airflow2_standin.username, airflow2_standin.password
    )
    reference = HistoryWriter(client, "ref:", settings.retention_ms)
    redis_url = f"redis://{redis_proc.host}:{redis_proc.port}/0"
    with WorkerProcess(
        fw.settings,
        tmp_path,
        fivetran_api_url=fivetran.url,
        fivetran_api_key=API_KEY,
        fivetran_api_secret=API_SECRET,
        reconcile_minutes=PERIOD_MIN,
    ) as worker:
        with webhook_server(redis_url, tmp_path, workers=1) as (base, _):
            url = base + "/webhooks/fivetran"
            for k in range(BEFORE):
                for i in range(len(CONNECTORS)):
                    assert play_sync(fivetran, reference, url, i, k)
        # The webhook server is down from here on; Fivetran gives up on what it sends.
        missed = 0
        latencies: list[float] = []
        runs_before = fivetran.calls["GET /v1/connections"]
        started = time.monotonic()
        for k in range(BEFORE, BEFORE + DURING):
            for i in range(len(CONNECTORS)):
                assert not play_sync(fivetran, reference, None, i, k)
                missed += 1
            ended = time.monotonic()

            def recorded(k: int = k) -> bool:
                return all(
                    to_ms(end_of(i, k)) in successes(client, cid)
                    for i, cid in enumerate(CONNECTORS)
                )

            poll_until(recorded, f"round {k} reconciled", 30, details=worker.log)
            latencies.append(time.monotonic() - ended)
        took = time.monotonic() - started
        runs = fivetran.calls["GET /v1/connections"] - runs_before
        # One run per period, however many workers (a pool of 4, each with RQ's scheduler).
        assert runs <= took / (PERIOD_MIN * 60) + 2, runs

        # Every success is in the history: the delivered ones and the reconciled ones.
        for i, cid in enumerate(CONNECTORS):
            assert successes(client, cid) == [to_ms(end_of(i, k)) for k in range(BEFORE + DURING)]
        # Each forwarded once: one Airflow event per (sync, dataset URI).
        total = len(CONNECTORS) * (BEFORE + DURING)
        poll_until(
            lambda: len(airflow2_standin.events) >= total,
            "every success forwarded",
            60,
            details=worker.log,
        )
        keys = Counter(
            (e["dataset_uri"], e["extra"].get("sync_id")) for e in airflow2_standin.events
        )
        assert len(keys) == total and set(keys.values()) == {1}, keys

    # The sensor decides as it would have with every delivery.
    now = to_ms(datetime.now(timezone.utc))
    got = decisions(HistoryReader(client, "test:", settings.max_sync_duration_ms), now)
    want = decisions(HistoryReader(client, "ref:", settings.max_sync_duration_ms), now)
    assert got == want
    print(
        f"\noutage of {DURING} syncs per connector x {len(CONNECTORS)} connectors: "
        f"{missed} syncs missed by the webhook, {missed} recovered by reconcile "
        f"({runs} reconcile runs in {took:.1f} s, every {PERIOD_MIN * 60:.0f} s); "
        f"seconds from a sync's end to recorded: max {max(latencies):.2f}, "
        f"mean {sum(latencies) / len(latencies):.2f}; "
        f"last run took {_run_seconds(client):.3f} s from its start to recorded; "
        f"{len(airflow2_standin.events)} Airflow events, one per sync and URI; "
        f"{len(got)} decisions equal to the full history's"
    )


def _run_seconds(client: redis.Redis) -> float:
    run = last_outcome(client, "test:")
    assert run is not None
    return (to_ms(parse_iso(run["finished_at"])) - to_ms(parse_iso(run["started_at"]))) / 1000


def test_two_syncs_between_runs_are_both_recovered(
    client: redis.Redis, settings: Settings, fivetran: FivetranStandIn
) -> None:
    """Fivetran's list has only the latest succeeded_at: the sync history has the other."""
    from webhook_app.worker.schedule import reconcile_run

    s = settings.model_copy(
        update={
            "fivetran_api_url": fivetran.url,
            "fivetran_api_key": SecretStr(API_KEY),
            "fivetran_api_secret": SecretStr(API_SECRET),
            "airflow_url": None,
        }
    )
    reference = HistoryWriter(client, "ref:", settings.retention_ms)
    for k in range(2):
        play_sync(fivetran, reference, None, 0, k)
    outcome = reconcile_run(s)
    assert [(e.sync_id, iso(e.created_ms)) for e in outcome.recorded] == [
        (sync_id(CONNECTORS[0], k), iso(end_of(0, k))) for k in range(2)
    ]
    assert successes(client, CONNECTORS[0]) == [to_ms(end_of(0, k)) for k in range(2)]
