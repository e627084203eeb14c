"""``rq_job``: a job's call and its times written as RQ writes them, at less cost."""

from __future__ import annotations

import pickle
import random
import zlib
from datetime import datetime, timezone

import pytest
from rq.utils import str_to_date, utcformat

from webhook_app.forwarding.rq_job import compress, utc_stamp


@pytest.mark.parametrize("size", [0, 1, 150, 65_535, 65_536, 200_000])
def test_any_zlib_reader_gets_the_bytes_back(size: int) -> None:
    """RQ reads ``data`` with ``zlib.decompress``: every size comes back exactly."""
    data = random.Random(size).randbytes(size)
    assert zlib.decompress(compress(data)) == data


def test_a_pickled_call_costs_eleven_bytes_more() -> None:
    """One stored block: a 2-byte header, 5 bytes of block header, a 4-byte checksum."""
    call = pickle.dumps(("webhook_app.jobs.forward_sync", None, (), {"delivery": "c:s:u"}), 5)
    packed = compress(call)
    assert len(packed) == len(call) + 11
    assert zlib.decompressobj().decompress(packed) == call


def test_a_damaged_stream_is_refused() -> None:
    """The checksum is real: a flipped byte of the call fails ``zlib.decompress``."""
    packed = bytearray(compress(b"forward this delivery"))
    packed[10] ^= 0x01
    with pytest.raises(zlib.error):
        zlib.decompress(bytes(packed))


@pytest.mark.parametrize(
    "at",
    [
        datetime(2026, 12, 1, 9, 29, 54, 121520, tzinfo=timezone.utc),
        datetime(2026, 1, 2, 3, 4, 5, 0, tzinfo=timezone.utc),  # no microseconds
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc),
    ],
)
def test_stamps_are_written_as_rq_writes_them(at: datetime) -> None:
    """``created_at``/``enqueued_at`` as RQ's own ``utcformat`` (its reader parses them)."""
    assert utc_stamp(at) == utcformat(at)
    assert str_to_date(utc_stamp(at)) == at
