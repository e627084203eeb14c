"""The Redis key layout: every key this project writes is named here and nowhere else.

``{p}`` is the configurable prefix, ``{c}`` the connector id. A connector's sorted sets,
``{p}h:{c}:`` + ``CONNECTOR_SETS``, are drawn and sized in docs/internals.md ("The
history in Redis"); ``starts`` and ``seen`` are trimmed RECENT_MS (history/writer.py)
behind the connector's newest event. The other keys::

    {p}connectors      HASH  connector id -> JSON {name, type, group, last_event_at}; only
                       moves forward (an older event fills gaps, changes nothing else)
    {p}changes:{c}     pub/sub channel, published on every recorded event of the connector
    {p}readyz          STRING  written (with a short expiry) by the web app's readiness probe
    {p}reconcile       STRING  JSON of the last reconcile (fivetran_events/reconcile.py):
                       its time, counts and the webhooks Fivetran reported inactive
    {p}reconcile:job:{n} STRING  set NX by the worker that schedules reconcile period n
                       (expires after two periods)
    {p}tables:{c}      STRING  JSON of the connector's enabled destination tables, named
                       (fivetran_events/destinations.py); kept a week past its refresh
    {p}tables:{c}:fresh STRING  present while that list needs no refresh (expires daily;
                       deleted by edit_connector, resync_table and schema changes)
    {p}waitfrom:{t}    STRING  the target (epoch ms) an Airflow task waiting for "the next
                       sync" chose on its first try, set NX so its retries keep it; {t}
                       hashes the task instance's key and the connector
                       (airflow_plugin/astronomer.py)

Connector ids are validated to an alphabet without ``:``, so no two connectors' keys collide.

RQ names its own keys (``rq:queue:{queue}``, ``rq:job:{id}``, its registries per queue);
a deployment's queue name and job ids begin with its prefix (``queue_name``,
``job_id_prefix``), so deployments sharing a Redis never see each other's jobs.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

DEFAULT_PREFIX = "fte:"

#: The per-connector sets (ConnectorKeys' attribute names).
CONNECTOR_SETS = ("ok", "okstart", "fail", "other", "resyncs", "starts", "running", "seen")


@dataclass(frozen=True)
class ConnectorKeys:
    """The names of one connector's keys: a set's is ``{p}h:{c}:{its suffix}``."""

    prefix: str
    connector_id: str
    ok: str = field(init=False)
    okstart: str = field(init=False)
    fail: str = field(init=False)
    other: str = field(init=False)
    resyncs: str = field(init=False)
    starts: str = field(init=False)
    running: str = field(init=False)
    seen: str = field(init=False)
    channel: str = field(init=False)

    def __post_init__(self) -> None:
        for suffix in CONNECTOR_SETS:
            object.__setattr__(self, suffix, f"{self.prefix}h:{self.connector_id}:{suffix}")
        object.__setattr__(self, "channel", f"{self.prefix}changes:{self.connector_id}")


def connectors_key(prefix: str) -> str:
    return f"{prefix}connectors"


def last_test_event_key(prefix: str) -> str:
    """The string holding the newest ``test_event`` received (for setup checks)."""
    return f"{prefix}last_test_event"


def readiness_key(prefix: str) -> str:
    """The string /readyz writes: readiness means Redis takes writes, not just PING."""
    return f"{prefix}readyz"


def reconcile_key(prefix: str) -> str:
    return f"{prefix}reconcile"


def reconcile_period_key(prefix: str, period: int) -> str:
    return f"{prefix}reconcile:job:{period}"


def queue_name(prefix: str) -> str:
    """RQ's queue of a deployment's jobs (forwarding attempts, reconcile runs)."""
    return f"{prefix}forward"


def job_id_prefix(prefix: str) -> str:
    """What every RQ job id of a deployment begins with: RQ takes ``[A-Za-z0-9_-]`` only, so other
    characters go, and a hash of the whole prefix keeps ``a:b`` and ``a.b`` apart."""
    readable = re.sub(r"[^A-Za-z0-9_-]", "", prefix)[:24]
    digest = hashlib.sha1(prefix.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"{readable}-{digest}-"


def tables_key(prefix: str, connector_id: str) -> str:
    return f"{prefix}tables:{connector_id}"


def tables_fresh_key(prefix: str, connector_id: str) -> str:
    return f"{prefix}tables:{connector_id}:fresh"


def wait_from_key(prefix: str, *task_instance: object) -> str:
    return f"{prefix}waitfrom:{uri_digest(repr(task_instance))}"


def changes_pattern(prefix: str) -> str:
    return f"{prefix}changes:*"


# --- Forwarding to Airflow -------------------------------------------------------------
#
#     {p}fwd:d:{c}:{s}:{u}   HASH  one delivery of sync {s} to dataset URI hash {u}: state,
#                                  attempts, reason, Airflow's event id, the extra posted, ...
#     {p}fwd:lock:{id}       STRING  held by the attempt working on delivery {id} (a lease)
#     {p}fwd:key:{k}         STRING  held across a keyed POST with partition key hash {k}
#     {p}fwd:s:{c}:{s}       SET   the delivery ids of one sync (the syncs API joins on it)
#     {p}fwd:all             ZSET  every delivery id, score: webhook receipt ms (listing)
#     {p}fwd:undelivered     ZSET  deliveries given up (404, retries exhausted), for replay
#     {p}fwd:due             ZSET  deliveries that need an attempt at score ms: new ones,
#                                  retries, leases of in-flight attempts (a dead worker's resume)
#     {p}fwd:wake            LIST  at most one element: pushed when deliveries are made due now,
#                                  popped (BLPOP) by a worker's sweeper, which then sweeps
#     {p}fwd:st:{state}      ZSET  the deliveries in one state but delivered, score: receipt
#                                  ms, so counting a state is one ZCARD (the scrape-time gauges)
#     {p}fwd:asset:{u}       STRING  Airflow's id of the asset with URI hash {u}, found by one
#                                  worker and shared with the others until it expires


def uri_digest(uri: str) -> str:
    return hashlib.blake2b(uri.encode(), digest_size=10).hexdigest()


def delivery_id(connector_id: str, sync_id: str, uri: str) -> str:
    return f"{connector_id}:{sync_id}:{uri_digest(uri)}"


def asset_id_key(prefix: str, uri: str) -> str:
    return f"{prefix}fwd:asset:{uri_digest(uri)}"


def delivery_key(prefix: str, delivery: str) -> str:
    return f"{prefix}fwd:d:{delivery}"


def delivery_lock_key(prefix: str, delivery: str) -> str:
    return f"{prefix}fwd:lock:{delivery}"


def partition_turn_key(prefix: str, partition_key: str) -> str:
    return f"{prefix}fwd:key:{uri_digest(partition_key)}"


def sync_deliveries_key(prefix: str, connector_id: str, sync_id: str) -> str:
    return f"{prefix}fwd:s:{connector_id}:{sync_id}"


def deliveries_key(prefix: str) -> str:
    return f"{prefix}fwd:all"


def undelivered_key(prefix: str) -> str:
    return f"{prefix}fwd:undelivered"


def due_key(prefix: str) -> str:
    return f"{prefix}fwd:due"


def sweep_wake_key(prefix: str) -> str:
    return f"{prefix}fwd:wake"


def delivery_state_key(prefix: str, state: str) -> str:
    return f"{prefix}fwd:st:{state}"
