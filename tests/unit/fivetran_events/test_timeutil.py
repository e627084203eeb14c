"""Time conversions: exact to the millisecond for every year the model accepts."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fivetran_events import parse_event
from fivetran_events.timeutil import from_ms, iso, parse_iso, to_ms
from testkit.support import encode, payload

#: Every instant ``datetime`` can hold, at millisecond precision (what the history keeps).
MS_INSTANTS = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999_000)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))


class TestMilliseconds:
    @given(MS_INSTANTS)
    @example(datetime(9999, 12, 31, 23, 59, 59, 999_000))
    @example(datetime(1, 1, 1, 0, 0, 0, 1_000))
    @example(datetime(2999, 1, 1, 0, 0, 0, 1_000))
    def test_iso_is_exact_for_every_year(self, instant: datetime) -> None:
        """Epoch ms back to text loses nothing, near 1970 or far from it."""
        text = instant.isoformat(timespec="milliseconds") + "Z"
        ms = to_ms(parse_iso(text))
        assert iso(ms) == text
        assert from_ms(ms) == instant.replace(tzinfo=timezone.utc)

    @pytest.mark.parametrize("created", ["0001-01-01T00:00:00.001Z", "9999-12-31T23:59:59.999Z"])
    def test_an_accepted_created_reads_back_unchanged(self, created: str) -> None:
        """The model's earliest and latest ``created`` format back to the same text."""
        event = parse_event(encode(payload(created=created, sync_id="s1")))
        assert iso(event.created_ms) == created
