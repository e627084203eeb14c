"""The forwarding half of ``bench/storage.py``: what a successful sync leaves besides history.

A sample of syncs goes through the webhook's real write (``HistoryWriter.record`` with
the app's ``State.on_success``: delivery records, due now, and their indexes in the
history's script), then a sweep queues their RQ jobs and a real ``ForwardingWorker`` in
burst mode (as ``fivetran-events worker --burst``) delivers them to the
Airflow 2 stand-in (real HTTP on 127.0.0.1), then the bench waits out the expiries that
settings make short (delivered records kept seconds instead of 72 h, a retry window of a
second) and writes one more sync, whose creation trims the listing's indexes. Expiries
fixed in code (RQ's result TTL) are read with PTTL rather than waited for; a key whose
measured TTL is under a week counts as gone after a week.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import redis
from rq.registry import clean_registries

from fivetran_events import Event, Settings
from testkit.airflow2_standin import Airflow2StandIn
from webhook_app.state import State
from webhook_app.worker.build import build_forwarder
from webhook_app.worker.rq_worker import ForwardingWorker

WEEK_MS = 7 * 86_400_000
#: RQ's registries: sorted sets of job ids scored by when the entry may go (unix seconds);
#: a worker's maintenance removes the entries past their score.
RQ_REGISTRIES = ("rq:finished:", "rq:failed:", "rq:wip:", "rq:started:", "rq:deferred:")
ID_FAMILIES = (
    "fwd:d:",
    "fwd:s:",
    "fwd:lock:",
    "fwd:asset:",
    "rq:job:",
    "rq:results:",
    "rq:worker:",
)


def family(key: bytes, prefix: str) -> str:
    """Name a key's family: ``h:*:ok``, ``fwd:d:*``, ``rq:job:*``; the key itself otherwise."""
    text = key.decode()
    if text.startswith(prefix):
        text = text[len(prefix) :]
        if text.startswith("h:"):
            return f"h:*:{text.rsplit(':', 1)[-1]}"
    for head in ID_FAMILIES:
        if text.startswith(head):
            return f"{head}*"
    return text


@dataclass
class Family:
    """A key family's keys: bytes (MEMORY USAGE), count, and their measured lives."""

    bytes: int = 0
    keys: int = 0
    ttls_ms: list[int] = field(default_factory=list)  # of the keys that have one
    persistent: int = 0  # keys without a TTL
    leaves_in_ms: int | None = None  # a registry: its last entry's score, from now
    after_week: int = 0  # bytes of the keys still there a week on

    def lives(self) -> str:
        """Say how this family's keys live, as measured (PTTL, registry scores)."""
        if self.leaves_in_ms is not None:
            return f"entries leave in <= {self.leaves_in_ms / 1000:.0f} s (RQ cleanup)"
        if not self.ttls_ms:
            return "no TTL"
        low, high = min(self.ttls_ms) / 1000, max(self.ttls_ms) / 1000
        span = f"{high:.0f} s" if round(low) == round(high) else f"{low:.0f}-{high:.0f} s"
        return f"TTL {span}" + (f", {self.persistent} without" if self.persistent else "")


def measure_all(client: redis.Redis, prefix: str) -> dict[str, Family]:
    """MEMORY USAGE, PTTL and (for RQ registries) the last score of every key, by family."""
    keys = list(client.scan_iter(count=1000))
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.memory_usage(k, samples=0)
        pipe.pttl(k)
    replies = pipe.execute()
    now_s = time.time()
    out: dict[str, Family] = defaultdict(Family)
    for i, k in enumerate(keys):
        used, ttl = int(replies[2 * i] or 0), int(replies[2 * i + 1])
        if ttl == -2:  # expired between SCAN and MEMORY USAGE
            continue
        fam = out[family(k, prefix)]
        fam.bytes += used
        fam.keys += 1
        if ttl >= 0:
            fam.ttls_ms.append(ttl)
        else:
            fam.persistent += 1
        stays = ttl == -1 or ttl > WEEK_MS
        if ttl == -1 and k.decode().startswith(RQ_REGISTRIES):
            last = client.zrange(k, -1, -1, withscores=True)
            left = int((float(last[0][1]) - now_s) * 1000) if last else 0
            fam.leaves_in_ms = max(fam.leaves_in_ms or 0, left)
            stays = left > WEEK_MS
        if stays:
            fam.after_week += used
    return dict(out)


def sample_settings(
    redis_url: str, prefix: str, airflow: Airflow2StandIn, keep_s: float
) -> Settings:
    """Settings of the sample: Airflow 2 at the stand-in, expiries of seconds, not days."""
    return Settings(
        redis_url=redis_url,
        key_prefix=prefix,
        airflow_url=airflow.url,
        airflow_username=airflow.username,
        airflow_password=airflow.password,  # type: ignore[arg-type]  # validated to SecretStr
        airflow_api_version="2",
        airflow_timeout_seconds=0.4,  # the lease: max(5 s, 12 x this)
        forward_lease_seconds=5,
        forward_unknown_outcome_seconds=0,
        forward_retry_hours=1 / 3600,
        forward_keep_delivered_hours=keep_s / 3600,
    )


@dataclass
class SampleResult:
    """The sample's measurements: right after the writes and once the expiries passed."""

    syncs: int
    successes: int
    at_write: dict[str, Family]
    delivered: dict[str, Family]
    after: dict[str, Family]
    used_at_write: int  # INFO used_memory delta, everything the sample wrote
    #: The same once the short expiries passed, without the sample's history keys and
    #: without the bytes of keys whose measured TTL ends within a week.
    used_after: int
    waited_rq: bool
    #: The keyspace's hash tables then (MEMORY STATS): part of what INFO counts beyond
    #: the keys' own MEMORY USAGE.
    tables_after: int
    took_s: float
    states: dict[str, int] = field(default_factory=dict)


def run_sample(
    settings: Settings,
    airflow: Airflow2StandIn,
    evs: Iterable[Event],
    last: list[Event],
    wait_rq: bool = False,
) -> SampleResult:
    """Write ``evs`` as the webhook does, deliver them, wait out the expiries, measure.

    ``wait_rq``: also wait out RQ's result TTL (5 min) before INFO used_memory is read;
    otherwise the bytes of keys whose measured TTL ends within a week are subtracted.
    ``last``: one more sync (start and end) written after the wait; its creation trims
    the listing's indexes, as one creation in TRIM_EVERY does in a running deployment.
    """
    started = time.perf_counter()
    for name in ("rq", "werkzeug"):  # a line per job and per request otherwise
        logging.getLogger(name).setLevel(logging.WARNING)
    st = State.from_settings(settings)
    client, prefix = st.redis, settings.key_prefix
    evs = list(evs)
    for e in evs + last:
        for uri in st.enqueuer.uri_map.uris(
            e.connector_id, e.connector_name, e.connector_type, e.group_id
        ):
            if uri not in airflow.datasets:
                airflow.add_dataset(uri)
    before = int(client.info("memory")["used_memory"])
    for e in evs:
        st.writer.record(e, on_success=st.on_success)
    used_at_write = int(client.info("memory")["used_memory"]) - before
    at_write = measure_all(client, prefix)
    fw = build_forwarder(settings)
    fw.sweep(limit=10**9)
    ForwardingWorker(fw).work(burst=True, with_scheduler=False, logging_level="WARNING")
    delivered = measure_all(client, prefix)
    states: dict[str, int] = defaultdict(int)
    for d in fw.store.recent(limit=10**9, scan_limit=10**9):
        states[d.state.value] += 1
    # Past the delivered records' keep time and the indexes' age limit (record_ttl_ms).
    time.sleep(fw.store.lifetimes.record_ttl_ms / 1000 + 1)
    st.enqueuer.trim_every = 1  # this one is the creation that trims
    for e in last:
        st.writer.record(e, on_success=st.on_success)
    fw.sweep(limit=10**9)
    ForwardingWorker(fw).work(burst=True, with_scheduler=False, logging_level="WARNING")
    for _ in client.scan_iter(count=1000):  # SCAN deletes the expired keys it meets
        pass
    after = measure_all(client, prefix)
    # The history is measured at full scale (storage.py); DEL frees at once (UNLINK lazily).
    history = list(client.scan_iter(match=f"{prefix}h:*", count=1000))
    for i in range(0, len(history), 1000):
        client.delete(*history[i : i + 1000])
    client.delete(f"{prefix}connectors")
    if wait_rq:  # RQ's TTLs too (300 s), then the registries' cleanup a worker runs
        longest = max((max(f.ttls_ms, default=0) for f in after.values()), default=0)
        time.sleep(longest / 1000 + 1)
        for _ in client.scan_iter(count=1000):
            pass
        clean_registries(fw.queue)
        going = 0
    else:  # minus what is still there but goes before a week is out (RQ's jobs: 300 s)
        going = sum(f.bytes - f.after_week for n, f in after.items() if not n.startswith("h:"))
    used_after = int(client.info("memory")["used_memory"]) - before - going
    db = client.memory_stats().get("db.0", {})
    tables = sum(int(db.get(f"overhead.hashtable.{t}", 0)) for t in ("main", "expires"))
    return SampleResult(
        syncs=sum(1 for e in evs if e.event == "sync_end"),
        successes=sum(1 for e in evs if e.is_success),
        at_write=at_write,
        delivered=delivered,
        after=after,
        used_at_write=used_at_write,
        used_after=used_after,
        waited_rq=wait_rq,
        tables_after=tables,
        took_s=time.perf_counter() - started,
        states=dict(states),
    )
