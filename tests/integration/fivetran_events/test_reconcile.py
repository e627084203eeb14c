"""Reconcile: a completion Fivetran reports that the history lacks is recorded, once.

Real Redis (the suite's), the record script itself, Fivetran's REST API stand-in. The
reconciled end has a derived sync id and no details: within _lua.SAME_SYNC_WINDOW_MS
of any other source's end of its status it is the same completion, whichever came first.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import redis

from fivetran_events import HistoryReader, HistoryWriter, Settings
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.history._lua import SAME_SYNC_WINDOW_MS
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
