"""Delivery records: one Redis hash per (successful sync, dataset URI), and their listing.

Split from forward.py (which makes the attempts) so that each module keeps one concern:
this one knows how a delivery is stored, created inside the webhook's transaction, read
back for the API and the CLI; it never talks to Airflow.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import redis
from redis.client import Pipeline

from fivetran_events import Event
from fivetran_events.keys import (
    deliveries_key,
    delivery_id,
    delivery_key,
    due_key,
    sync_deliveries_key,
    undelivered_key,
)
from fivetran_events.timeutil import iso


class DeliveryState(str, Enum):
    PENDING = "pending"  # queued or being attempted
    RETRYING = "retrying"  # an attempt failed in a way that may pass; next_attempt_at
    DELIVERED = "delivered"  # Airflow has the event; event_id is its id
    UNDELIVERED = "undelivered"  # 404 (no DAG uses the URI) or retries ran out: replayable
    FAILED = "failed"  # Airflow refused it (4xx); the reason holds its answer


FINAL = frozenset({DeliveryState.DELIVERED, DeliveryState.UNDELIVERED, DeliveryState.FAILED})
GIVEN_UP = frozenset({DeliveryState.UNDELIVERED, DeliveryState.FAILED})

# Create a delivery record unless it exists (a second success under one sync id must not
# reset a delivered record), name the RQ job queued for it, index it, and make it due. One
# command instead of ~20 keeps the webhook's transaction short: it runs inside the history
# write's MULTI. KEYS: record, sync's set, listing, due set. ARGV: id, ttl s, received ms,
# due ms, listing cutoff ms, job id, then field/value pairs.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 7))
end
redis.call('HSET', KEYS[1], 'job', ARGV[6])
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], 'NX', ARGV[3], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[5])
redis.call('ZADD', KEYS[4], 'NX', ARGV[4], ARGV[1])
return 1
"""


def forward_job_id(delivery: str, tag: str | int | None = None) -> str:
    """Name an attempt's RQ job (RQ allows only letters, digits, '_' and '-' in ids)."""
    digest = hashlib.blake2b(delivery.encode(), digest_size=12).hexdigest()
    return f"fwd-{digest}" if tag is None else f"fwd-{digest}-{tag}"


def _s(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Delivery:
    """One delivery as stored in its hash."""

    id: str
    fields: dict[str, str]

    def get(self, name: str) -> str | None:
        return self.fields.get(name) or None

    def ms(self, name: str) -> int | None:
        value = self.get(name)
        return int(value) if value else None

    @property
    def state(self) -> DeliveryState:
        return DeliveryState(self.fields.get("state", "pending"))

    @property
    def uri(self) -> str:
        return self.fields["uri"]

    def to_dict(self) -> dict[str, Any]:
        """The public view (API, CLI)."""
        f = self.fields
        event_id = self.get("event_id")
        return {
            "delivery_id": self.id,
            "connector_id": f.get("connector_id"),
            "sync_id": f.get("sync_id"),
            "uri": f.get("uri"),
            "state": self.state.value,
            "attempts": int(f.get("attempts") or 0),
            "airflow_event_id": int(event_id) if event_id else None,
            "airflow_event_at": self.get("event_at"),
            "reason": self.get("reason"),
            "received_at": iso(self.ms("received_ms")),
            "next_attempt_at": (
                iso(self.ms("next_attempt_ms")) if self.state is DeliveryState.RETRYING else None
            ),
            "updated_at": iso(self.ms("updated_ms")),
        }


class DeliveryStore:
    """Read and write delivery records (key names from fivetran_events.keys)."""

    def __init__(self, client: redis.Redis, prefix: str, retention_s: int) -> None:
        self.client = client
        self.prefix = prefix
        self.retention_s = retention_s

    def key(self, did: str) -> str:
        return delivery_key(self.prefix, did)

    @staticmethod
    def id_of(event: Event, uri: str) -> str:
        assert event.sync_id is not None
        return delivery_id(event.connector_id, event.sync_id, uri)

    def create(
        self, pipe: Pipeline, event: Event, uri: str, received_ms: int, due_ms: int, job_id: str
    ) -> str:
        """Queue the writes that create a delivery (kept as is if it already exists)."""
        assert event.sync_id is not None
        did = self.id_of(event, uri)
        key = self.key(did)
        base = {
            "connector_id": event.connector_id,
            "sync_id": event.sync_id,
            "uri": uri,
            "connector_name": event.connector_name or "",
            "connector_type": event.connector_type or "",
            "group_id": event.group_id or "",
            "status": event.status or "",
            "ended_ms": str(event.created_ms),
            "received_ms": str(received_ms),
            "window_ms": str(received_ms),
            "state": DeliveryState.PENDING.value,
            "attempts": "0",
            "updated_ms": str(received_ms),
        }
        skey = sync_deliveries_key(self.prefix, event.connector_id, event.sync_id)
        # The listing keeps as long as the history does (the hashes expire by themselves).
        cutoff = received_ms - self.retention_s * 1000
        pairs = [x for item in base.items() for x in item]
        # EVAL, not EVALSHA: inside MULTI a NOSCRIPT error would fail this command alone
        # while the history write commits; redis-py's script objects also cost a SCRIPT
        # EXISTS round trip per transaction. Redis caches the compiled script anyway.
        pipe.eval(
            _CREATE,
            4,
            key,
            skey,
            deliveries_key(self.prefix),
            due_key(self.prefix),
            did,
            self.retention_s,
            received_ms,
            due_ms,
            cutoff,
            job_id,
            *pairs,
        )
        return did

    def get(self, did: str) -> Delivery | None:
        raw = self.client.hgetall(self.key(did))
        if not raw:
            return None
        return Delivery(did, {_s(k) or "": _s(v) or "" for k, v in raw.items()})

    def many(self, ids: Iterable[str]) -> list[Delivery]:
        ids = list(ids)
        pipe = self.client.pipeline(transaction=False)
        for did in ids:
            pipe.hgetall(self.key(did))
        out = []
        for did, raw in zip(ids, pipe.execute(), strict=True):
            if raw:
                out.append(Delivery(did, {_s(k) or "": _s(v) or "" for k, v in raw.items()}))
        return out

    def for_syncs(self, connector_id: str, sync_ids: Iterable[str]) -> dict[str, list[Delivery]]:
        """Return each sync's deliveries, sorted by URI (one round trip per batch)."""
        sync_ids = list(dict.fromkeys(sync_ids))
        pipe = self.client.pipeline(transaction=False)
        for sid in sync_ids:
            pipe.smembers(sync_deliveries_key(self.prefix, connector_id, sid))
        members = pipe.execute()
        ids = sorted({_s(m) or "" for ms in members for m in ms})
        by_id = {d.id: d for d in self.many(ids)}
        out: dict[str, list[Delivery]] = {}
        for sid, ms in zip(sync_ids, members, strict=True):
            found = [by_id[_s(m) or ""] for m in ms if (_s(m) or "") in by_id]
            out[sid] = sorted(found, key=lambda d: d.uri)
        return out

    def recent(
        self, limit: int = 100, state: DeliveryState | None = None, scan_limit: int = 100_000
    ) -> list[Delivery]:
        """Return the newest deliveries (of one state), newest first."""
        out: list[Delivery] = []
        start = 0
        page = max(limit, 200)
        while len(out) < limit and start < scan_limit:
            ids = [
                _s(m) or ""
                for m in self.client.zrevrange(deliveries_key(self.prefix), start, start + page - 1)
            ]
            if not ids:
                break
            for d in self.many(ids):
                if state is None or d.state is state:
                    out.append(d)
            start += page
        return out[:limit]

    def given_up(self) -> list[str]:
        return [_s(m) or "" for m in self.client.zrange(undelivered_key(self.prefix), 0, -1)]


def attach_forwarding(
    store: DeliveryStore, connector_id: str, rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Add each successful sync's forwarding state per URI to the syncs listing's rows."""
    wanted = [r["sync_id"] for r in rows if r.get("status") == "SUCCESSFUL"]
    found = store.for_syncs(connector_id, wanted) if wanted else {}
    for r in rows:
        if r.get("status") == "SUCCESSFUL":
            r["forwarding"] = [
                {
                    k: v
                    for k, v in d.to_dict().items()
                    if k not in ("connector_id", "sync_id", "delivery_id")
                }
                for d in found.get(r["sync_id"], [])
            ]
    return rows
