"""Reconcile: a completion Fivetran reports that the history lacks is recorded, once;
each connection's schedule and setup state are kept with its record.

Where the history lacks it, the connection's sync history (Fivetran's "Retrieve
Connection Sync History", the stand-in's endpoint shaped as its reference documents it)
gives every sync since the history's newest end, each with its own sync id; where that
endpoint answers 404 or 403, the reported time alone is recorded.

Real Redis (the suite's), the record script itself, Fivetran's REST API stand-in. The
reconciled end has a derived sync id and no details: within codec.SAME_SYNC_WINDOW_MS
of any other source's end of its status it is the same completion, whichever came first.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import redis

from fivetran_events import HistoryReader, HistoryWriter, Settings
from fivetran_events.decision import Outcome as Decided
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.freshness import Freshness, Schedule
from fivetran_events.history.codec import SAME_SYNC_WINDOW_MS
from fivetran_events.history.writer import WriteStatus
from fivetran_events.model import derived_sync_id
from fivetran_events.reconcile import Outcome, last_outcome, reconcile
from fivetran_events.timeutil import iso, to_ms
from testkit.fivetran_api import FivetranStandIn, serving
from testkit.support import at, ev

CID = "assimilate_seem"
SID = "9a3f1c2e-4b5d-4e6f-8a7b-1c2d3e4f5a6b"
OFF = timedelta(milliseconds=1500)
NOW = int(at(20).timestamp() * 1000)


@pytest.fixture
def fivetran() -> Iterator[FivetranStandIn]:
    with serving(FivetranStandIn()) as api:
        yield api


@pytest.fixture
def api(fivetran: FivetranStandIn) -> Iterator[FivetranClient]:
    with FivetranClient("key", "secret", fivetran.url, backoff=0.01) as c:
        yield c


def run(client: redis.Redis, settings: Settings, api: FivetranClient) -> Outcome:
    return reconcile(client, api, "test:", settings.retention_ms, settings.max_clock_skew_ms)


def rows(reader: HistoryReader) -> list[tuple[str, str, str | None]]:
    return [(r["sync_id"], r["status"], r.get("source")) for r in reader.syncs(CID, now=NOW)]


def delivered(ended: datetime, sync_id: str = SID, status: str = "SUCCESSFUL") -> list:  # type: ignore[type-arg]
    return [
        ev("sync_start", sync_id=sync_id, created=ended - timedelta(minutes=10)),
        ev(sync_id=sync_id, created=ended, status=status),
    ]


def test_a_success_the_webhook_never_delivered_is_recorded_once(
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    reader: HistoryReader,
) -> None:
    fivetran.connector(CID, succeeded_at=at(3, 2), failed_at=at(2, 5))
    first = run(client, settings, api)
    assert (len(first.recorded), first.known, first.connections) == (2, 0, 1)
    derived = derived_sync_id(CID, to_ms(at(3, 2)))
    assert rows(reader) == [
        (derived, "SUCCESSFUL", "reconciled"),
        (derived_sync_id(CID, to_ms(at(2, 5))), "FAILURE", "reconciled"),
    ]
    again = run(client, settings, api)
    assert (len(again.recorded), again.known) == (0, 2)
    assert len(rows(reader)) == 2
    stored = last_outcome(client, "test:")
    assert stored is not None and stored["recorded"] == 0 and stored["known"] == 2


@pytest.mark.parametrize("shift", [timedelta(0), OFF, -OFF])
def test_the_webhooks_delivery_first_then_reconcile_records_nothing(
    shift: timedelta,
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    writer: HistoryWriter,
    reader: HistoryReader,
) -> None:
    for e in delivered(at(3, 2)):
        assert writer.record(e).status is WriteStatus.RECORDED
    fivetran.connector(CID, succeeded_at=at(3, 2) + shift)
    outcome = run(client, settings, api)
    assert (len(outcome.recorded), outcome.known) == (0, 1)
    assert rows(reader) == [(SID, "SUCCESSFUL", None)]


@pytest.mark.parametrize("shift", [timedelta(0), OFF, -OFF])
def test_reconcile_first_then_the_webhooks_late_delivery_is_already_known(
    shift: timedelta,
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    writer: HistoryWriter,
    reader: HistoryReader,
) -> None:
    fivetran.connector(CID, succeeded_at=at(3, 2) + shift)
    assert len(run(client, settings, api).recorded) == 1
    start, end = delivered(at(3, 2))
    writer.record(start)  # Fivetran's retries: the start, then the end
    assert writer.record(end).status is WriteStatus.DUPLICATE
    assert reader.facts(CID, NOW, NOW).running is None  # the end closed the delivered start
    assert rows(reader) == [
        (derived_sync_id(CID, to_ms(at(3, 2) + shift)), "SUCCESSFUL", "reconciled")
    ]


def test_an_end_outside_the_window_is_another_completion(
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    writer: HistoryWriter,
    reader: HistoryReader,
) -> None:
    late = timedelta(milliseconds=SAME_SYNC_WINDOW_MS + 1)
    for e in delivered(at(3, 2)):
        writer.record(e)
    fivetran.connector(CID, succeeded_at=at(3, 2) + late)
    assert len(run(client, settings, api).recorded) == 1
    assert [r[2] for r in rows(reader)] == ["reconciled", None]


def test_a_failure_is_not_a_success_and_a_started_sync_is_closed(
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    writer: HistoryWriter,
    reader: HistoryReader,
) -> None:
    """The webhook delivered the start, lost the end: the reconciled end takes that start
    (one connector's syncs never overlap), so the connector no longer reads as running."""
    start, _ = delivered(at(3, 2))
    writer.record(start)
    writer.record(ev(sync_id="other", created=at(3, 2), status="FAILURE"))
    fivetran.connector(CID, succeeded_at=at(3, 2))
    assert len(run(client, settings, api).recorded) == 1
    assert reader.facts(CID, NOW, NOW).running is None
    success = [r for r in reader.syncs(CID, now=NOW) if r["status"] == "SUCCESSFUL"]
    assert success[0]["started_at"] == iso(at(3, 1, 50))


def test_inactive_webhooks_are_kept_with_the_outcome(
    client: redis.Redis, settings: Settings, api: FivetranClient, fivetran: FivetranStandIn
) -> None:
    fivetran.webhooks["w1"] = {
        "id": "w1",
        "type": "account",
        "url": "https://example.com/webhook",
        "events": ["sync_end"],
        "active": False,
        "secret": "s",
    }
    fivetran.webhooks["w2"] = {**fivetran.webhooks["w1"], "id": "w2", "active": True}
    outcome = run(client, settings, api)
    assert [w["id"] for w in outcome.inactive_webhooks] == ["w1"]
    stored = last_outcome(client, "test:")
    assert stored is not None and [w["id"] for w in stored["inactive_webhooks"]] == ["w1"]


# --- The sync history: read only for a connection whose reported completion is new ------

HISTORY = "GET /v1/connections/{id}/sync-history"
#: Syncs of these tests end at BASE + n hours (recent: inside the history's lookback).
BASE = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(days=1)


def hours(n: float) -> datetime:
    return BASE + timedelta(hours=n)


def sid(n: int) -> str:
    return f"sync-{n}"


def ran(fivetran: FivetranStandIn, n: int, cid: str = CID, status: str = "SUCCESSFUL") -> None:
    """Fivetran ran sync ``n`` of ``cid``, ending at hours(n); no webhook came."""
    if cid not in fivetran.connectors:
        fivetran.connector(cid)
    fivetran.past_sync(cid, sid(n), hours(n) - timedelta(minutes=10), hours(n), status)


def deliver(writer: HistoryWriter, n: int, cid: str = CID) -> None:
    """The webhook delivered sync ``n``'s end (and Fivetran ran it)."""
    writer.record(ev(connector_id=cid, sync_id=sid(n), created=hours(n)))


def recorded(reader: HistoryReader) -> list[tuple[str, str, str | None]]:
    return rows(reader)[::-1]


def test_a_missed_sync_that_is_not_the_latest_is_recovered_with_its_own_id(
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    writer: HistoryWriter,
    reader: HistoryReader,
) -> None:
    ran(fivetran, 0)
    deliver(writer, 0)
    ran(fivetran, 1)
    ran(fivetran, 2, status="FAILURE")
    ran(fivetran, 3)  # the latest success: all Fivetran's connection list reports of it
    outcome = run(client, settings, api)
    assert [(e.sync_id, e.status) for e in outcome.recorded] == [
        (sid(1), "SUCCESSFUL"),
        (sid(2), "FAILURE"),
        (sid(3), "SUCCESSFUL"),
    ]
    assert recorded(reader) == [
        (sid(0), "SUCCESSFUL", None),
        (sid(1), "SUCCESSFUL", "reconciled"),
        (sid(2), "FAILURE", "reconciled"),
        (sid(3), "SUCCESSFUL", "reconciled"),
    ]
    assert fivetran.calls[HISTORY] == 1 and outcome.sync_histories == 1
    # Now the history has what Fivetran reports: no sync-history call, nothing new.
    again = run(client, settings, api)
    assert (len(again.recorded), again.known, again.sync_histories) == (0, 2, 0)
    assert fivetran.calls[HISTORY] == 1


def test_the_webhooks_late_delivery_of_a_recovered_sync_is_a_duplicate(
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    writer: HistoryWriter,
    reader: HistoryReader,
) -> None:
    for n in (1, 2):
        ran(fivetran, n)
    run(client, settings, api)
    end = ev(sync_id=sid(1), created=hours(1) + timedelta(seconds=2))
    assert writer.record(end).status is WriteStatus.DUPLICATE
    assert [r[0] for r in recorded(reader)] == [sid(1), sid(2)]


def test_one_paged_list_call_when_the_history_has_every_reported_completion(
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    writer: HistoryWriter,
) -> None:
    """The common case: one list of connections, one of webhooks, no sync history; a
    connection whose latest completion is new costs one call (one 7-day window)."""
    others = [f"conn_{i}" for i in range(5)]
    for cid in others:
        fivetran.connector(cid)
        ran(fivetran, 1, cid)
        deliver(writer, 1, cid)
    ran(fivetran, 1)
    deliver(writer, 1)
    run(client, settings, api)
    assert dict(fivetran.calls) == {"GET /v1/connections": 1, "GET /v1/webhooks": 1}
    ran(fivetran, 2)  # CID's newest success: the webhook missed it
    outcome = run(client, settings, api)
    assert fivetran.calls[HISTORY] == 1 and fivetran.calls["GET /v1/connections"] == 2
    assert [e.sync_id for e in outcome.recorded] == [sid(2)]


def test_a_gap_longer_than_seven_days_is_read_in_windows(
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    writer: HistoryWriter,
) -> None:
    """The stand-in refuses a range over 7 days with 400, as Fivetran does."""
    ran(fivetran, -24 * 10)
    deliver(writer, -24 * 10)
    ran(fivetran, -24 * 9)
    ran(fivetran, 0)
    outcome = run(client, settings, api)
    assert [e.sync_id for e in outcome.recorded] == [sid(-24 * 9), sid(0)]
    assert fivetran.calls[HISTORY] == 2


@pytest.mark.parametrize("status", [404, 403])
def test_without_the_sync_history_the_latest_completion_is_recorded(
    status: int,
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    reader: HistoryReader,
) -> None:
    fivetran.sync_history_status = status
    for n in (1, 2):
        ran(fivetran, n)
    outcome = run(client, settings, api)
    assert fivetran.calls[HISTORY] == 1 and outcome.sync_histories == 0
    derived = derived_sync_id(CID, to_ms(hours(2)))
    assert recorded(reader) == [(derived, "SUCCESSFUL", "reconciled")]


def test_a_reported_completion_the_sync_history_lacks_is_still_recorded(
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    reader: HistoryReader,
) -> None:
    """Fivetran's list and its history disagree (the history lists nothing yet): the
    reported time is recorded, as without the history."""
    fivetran.connector(CID, succeeded_at=hours(2))
    ran(fivetran, 1, status="FAILURE")
    run(client, settings, api)
    assert recorded(reader) == [
        (sid(1), "FAILURE", "reconciled"),
        (derived_sync_id(CID, to_ms(hours(2))), "SUCCESSFUL", "reconciled"),
    ]


def test_a_completion_older_than_the_lookback_costs_no_call(
    client: redis.Redis, settings: Settings, api: FivetranClient, fivetran: FivetranStandIn
) -> None:
    """Older gaps are the LOG import's: no sync-history call, on this run or the next."""
    fivetran.connector(CID, succeeded_at=BASE - timedelta(days=40))
    for _ in range(2):
        run(client, settings, api)
    assert fivetran.calls[HISTORY] == 0


def test_the_schedule_is_kept_with_the_record_from_one_list_call(
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    reader: HistoryReader,
    writer: HistoryWriter,
) -> None:
    fivetran.connector(CID, succeeded_at=at(3, 5), schedule_type="auto", sync_frequency=60)
    fivetran.connector(
        "daily_one",
        succeeded_at=at(3, 2),
        schedule_type="auto",
        sync_frequency=1440,
        daily_sync_time="03:00",
    )
    fivetran.connector("never_synced", schedule_type="auto", sync_frequency=15)
    run(client, settings, api)
    assert dict(fivetran.calls) == {"GET /v1/connections": 1, "GET /v1/webhooks": 1}
    rec = reader.connector(CID)
    assert rec is not None and rec.schedule is not None
    assert rec.schedule == Schedule(60, None, "auto", False, "connected", rec.schedule.seen_at)
    daily = reader.connector("daily_one")
    assert daily is not None and daily.schedule is not None
    assert (daily.schedule.sync_frequency, daily.schedule.daily_sync_time) == (1440, "03:00")
    assert reader.connector("never_synced") is None  # no record made for a schedule alone
    # A later event's write keeps the schedule (the record script merges field by field).
    writer.record(ev(created=at(3, 6), sync_id="later"))
    kept = reader.connector(CID)
    assert kept is not None and kept.schedule == rec.schedule
    assert kept.last_event_at == iso(to_ms(at(3, 6)))
    due = Freshness().describe(kept, to_ms(at(3, 6)), to_ms(at(3, 8)))
    assert due == {"due_at": iso(to_ms(at(3, 7, 15))), "overdue": True, "overdue_seconds": 2700}


def test_a_connection_fivetran_reports_broken_fails_a_waiting_target(
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    reader: HistoryReader,
    writer: HistoryWriter,
) -> None:
    fivetran.connector(CID, succeeded_at=at(3, 5), setup_state="broken")
    run(client, settings, api)
    assert reader.decide(CID, at(3, 4)).outcome is Decided.SUCCESS  # a past target still passes
    broken = reader.decide(CID, at(3, 6))
    assert broken.outcome is Decided.FAIL
    assert "setup_state broken in Fivetran's connection list" in broken.reason
    assert reader.decide(CID, at(3, 6), wait_when_broken=True).outcome is Decided.WAIT
    # Fixed: the next list says connected, and the target waits again.
    fivetran.connector(CID, succeeded_at=at(3, 5))
    run(client, settings, api)
    assert reader.decide(CID, at(3, 6)).outcome is Decided.WAIT


def test_fail_when_overdue_after_fails_a_wait_on_a_late_connector(
    client: redis.Redis,
    settings: Settings,
    api: FivetranClient,
    fivetran: FivetranStandIn,
    reader: HistoryReader,
    writer: HistoryWriter,
) -> None:
    """Hourly, last success at 05:00, due at 06:15: at 08:00 it is 1 h 45 min late."""
    fivetran.connector(CID, succeeded_at=at(3, 5), schedule_type="auto", sync_frequency=60)
    run(client, settings, api)
    now = to_ms(at(3, 8))
    assert reader.decide(CID, at(3, 6), now=now).outcome is Decided.WAIT
    patient = reader.decide(CID, at(3, 6), now=now, fail_when_overdue_after=7200)
    assert patient.outcome is Decided.WAIT
    late = reader.decide(CID, at(3, 6), now=now, fail_when_overdue_after=3600)
    assert late.outcome is Decided.FAIL
    assert "overdue by 1h45m" in late.reason and "due at 2026-01-03T06:15:00.000Z" in late.reason
    past = reader.decide(CID, at(3, 4), now=now, fail_when_overdue_after=60)
    assert past.outcome is Decided.SUCCESS  # a success counts: lateness is not asked
    writer.record(ev("sync_start", created=at(3, 7, 30), sync_id="catching-up"))
    running = reader.decide(CID, at(3, 6), now=now, fail_when_overdue_after=3600)
    assert running.outcome is Decided.WAIT  # a sync runs: it is catching up
