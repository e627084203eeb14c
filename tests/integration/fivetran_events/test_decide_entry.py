"""One decision entry point: ``reader.decide(connector, target, *, criterion, ...)``.

The readers derive what the criterion needs to read, so no caller compares criterion
names; the async twin answers as the sync reader does; a decision survives the JSON of
a trigger's event. Real redis-server.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aredis

from fivetran_events import AsyncHistoryReader, Decision, HistoryReader, HistoryWriter, Outcome
from fivetran_events.timeutil import to_ms
from testkit.support import at, ev

CID = "assimilate_seem"
DAY = 24 * 3600 * 1000


@pytest.fixture
def history(writer: HistoryWriter) -> None:
    """Day 1: a sync started before noon ends after it; day 4 a failure; day 6 one runs."""
    writer.record(ev("sync_start", sync_id="s", created=at(1, 11)))
    writer.record(ev(sync_id="s", created=at(1, 13)))
    writer.record(ev(sync_id="f", status="FAILED", created=at(4), reason="quota"))
    writer.record(ev("sync_start", sync_id="r", created=at(6, 1)))


def adecide(redis_url: str, *args: Any, **kwargs: Any) -> Decision:
    async def run() -> Decision:
        client = aredis.Redis.from_url(redis_url)
        try:
            return await AsyncHistoryReader(client, "test:", DAY).decide(*args, **kwargs)
        finally:
            await client.aclose()

    return asyncio.run(run())


CASES = [
    # (target, keyword arguments, outcome, deciding sync)
    (at(1, 12), {}, Outcome.SUCCESS, "s"),
    (at(1, 12), {"criterion": "started_after"}, Outcome.FAIL, "f"),
    (at(1), {"criterion": "started_after"}, Outcome.SUCCESS, "s"),
    (to_ms(at(3)), {}, Outcome.FAIL, "f"),
    (at(5), {}, Outcome.FAIL, "f"),
    (at(5), {"propagate_failures_forward": False}, Outcome.WAIT, None),
    (at(6), {"always_wait_when_syncing": True, "now": to_ms(at(6, 2))}, Outcome.WAIT, "r"),
]


class TestDecide:
    @pytest.mark.parametrize(("target", "kwargs", "outcome", "sync_id"), CASES)
    def test_sync_and_async_readers_decide_alike(
        self,
        history: None,
        reader: HistoryReader,
        redis_url: str,
        target: Any,
        kwargs: dict[str, Any],
        outcome: Outcome,
        sync_id: str | None,
    ) -> None:
        """The criterion, the flags and the clock reach the decision in both readers."""
        got = reader.decide(CID, target, **kwargs)
        assert got.outcome is outcome
        assert (got.sync.sync_id if got.sync is not None else None) == sync_id
        assert adecide(redis_url, CID, target, **kwargs) == got

    def test_an_unknown_criterion_names_the_valid_ones(self, reader: HistoryReader) -> None:
        with pytest.raises(ValueError, match="ended_after, started_after"):
            reader.decide(CID, at(3), criterion="whenever")


class TestDecisionJson:
    @pytest.mark.parametrize(("target", "kwargs", "outcome", "sync_id"), CASES)
    def test_a_decision_survives_its_dict(
        self,
        history: None,
        reader: HistoryReader,
        target: Any,
        kwargs: dict[str, Any],
        outcome: Outcome,
        sync_id: str | None,
    ) -> None:
        """The trigger sends ``to_dict()``; the sensor rebuilds the same typed Decision."""
        d = reader.decide(CID, target, **kwargs)
        assert Decision.from_dict(d.to_dict()) == d
