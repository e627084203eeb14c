"""bench/storage.py's forwarding sample measures what a sync leaves, and sees it expire.

Real parts: the suite's redis-server, the webhook's write path, a ForwardingWorker in
burst mode and the Airflow 2 stand-in over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import time

import pytest

from bench.storage import PREFIX, events
from bench.storage_forwarding import family, run_sample, sample_settings
from testkit.airflow2_standin import running_airflow2_standin


def test_family_names_key_families() -> None:
    assert family(b"fte:h:calmly_seem:ok", PREFIX) == "h:*:ok"
    assert family(b"fte:fwd:d:calmly_seem:abc:123", PREFIX) == "fwd:d:*"
    assert family(b"fte:fwd:s:calmly_seem:abc", PREFIX) == "fwd:s:*"
    assert family(b"fte:fwd:all", PREFIX) == "fwd:all"
    assert family(b"rq:job:fwd-123", PREFIX) == "rq:job:*"
    assert family(b"rq:results:fwd-123", PREFIX) == "rq:results:*"
    assert family(b"rq:finished:fivetran-events", PREFIX) == "rq:finished:fivetran-events"


@pytest.mark.slow
def test_sample_sees_delivered_records_expire_and_rq_jobs_with_ttl(redis_url: str) -> None:
    now = int(time.time() * 1000)
    stream = list(events(12, 3, now - 600_000, span=3_000_000, seed=3))
    end = max(i for i, e in enumerate(stream) if e.is_success)
    kept, held = stream[: end - 1] + stream[end + 1 :], stream[end - 1 : end + 1]
    with running_airflow2_standin() as airflow:
        settings = sample_settings(redis_url, PREFIX, airflow, keep_s=2.0)
        result = run_sample(settings, airflow, kept, held)
        posted = len(airflow.events)
    successes = sum(1 for e in kept + held if e.is_success)
    assert result.syncs == 11
    assert result.successes == successes - 1
    assert result.states == {"delivered": result.successes}
    assert posted == successes  # one event a delivery, the held-back sync's included

    # Right after the writes: a record, a sync's set and a listing entry each; no RQ job
    # (the webhook queues none: the first sweep does).
    assert result.at_write["fwd:d:*"].keys == result.successes
    assert "rq:job:*" not in result.at_write
    assert result.at_write["fwd:all"].bytes > 0
    # Delivered: the records live the keep time, RQ's jobs their 300 s result TTL.
    delivered = result.delivered["fwd:d:*"]
    assert delivered.persistent == 0 and max(delivered.ttls_ms) <= 2_000
    jobs = result.delivered["rq:job:*"]
    assert jobs.persistent == 0 and 0 < max(jobs.ttls_ms) <= 300_000
    assert jobs.after_week == 0

    # Past the keep time: the sample's records and sets are gone, the listing is trimmed
    # to the held-back sync's entry, RQ's jobs count as gone (their TTL ends in 5 min).
    after = result.after
    assert "fwd:d:*" not in after or after["fwd:d:*"].after_week == 0
    assert "fwd:s:*" not in after or after["fwd:s:*"].after_week == 0
    assert after["fwd:all"].keys == 1
    assert after["fwd:all"].after_week < result.at_write["fwd:all"].bytes
    assert after["rq:job:*"].after_week == 0
    assert after["h:*:ok"].after_week > 0  # the history stays
