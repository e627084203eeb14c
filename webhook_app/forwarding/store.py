"""Delivery records: one Redis hash per (successful sync, dataset URI), and their indexes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis
from redis.client import Pipeline

from fivetran_events import Event, as_text
from fivetran_events.deliveries import INDEXED, Delivery, DeliveryState
from fivetran_events.keys import (
    deliveries_key,
    delivery_id,
    delivery_key,
    delivery_state_key,
    due_key,
    sync_deliveries_key,
    undelivered_key,
)

# Make a sync's set of delivery ids live as long as its longest-lived record (the syncs
# listing joins on it). KEYS: the set, then its records. Returns the set's new TTL in ms.
SET_EXPIRY = """
local longest = 0
for i = 2, #KEYS do
  local ttl = redis.call('PTTL', KEYS[i])
  if ttl > longest then longest = ttl end
end
if longest > 0 then
  redis.call('PEXPIRE', KEYS[1], longest)
end
return longest
"""


class DeliveryStore:
    """Read and write delivery records (key names from fivetran_events.keys)."""

    def __init__(self, client: redis.Redis, prefix: str, retention_s: int) -> None:
        self.client = client
        self.prefix = prefix
        self.retention_s = retention_s
        self.state_keys = [self.state_key(s) for s in INDEXED]
        self.set_expiry = client.register_script(SET_EXPIRY)

    def key(self, did: str) -> str:
        return delivery_key(self.prefix, did)

    def state_key(self, state: DeliveryState) -> str:
        return delivery_state_key(self.prefix, state.value)

    @staticmethod
    def id_of(event: Event, uri: str) -> str:
        assert event.sync_id is not None
        return delivery_id(event.connector_id, event.sync_id, uri)

    def index_state(self, pipe: Pipeline, d: Delivery, state: DeliveryState) -> None:
        """Queue the index writes of ``d`` entering ``state`` (in the caller's MULTI),
        scored by when its retry window opened: creation trims the indexes by that."""
        for s in INDEXED:
            if s is not state:
                pipe.zrem(self.state_key(s), d.id)
        if state in INDEXED:
            pipe.zadd(self.state_key(state), {d.id: d.window_ms})

    def expire(self, pipe: Pipeline, d: Delivery, ttl_ms: int) -> None:
        """Queue ``d``'s record to expire in ``ttl_ms``, its sync's set with its last record
        (the set is read now; the expiries are written in the caller's MULTI)."""
        sync_key = sync_deliveries_key(self.prefix, d.fields["connector_id"], d.fields["sync_id"])
        ids = sorted({as_text(m) for m in self.client.smembers(sync_key)} | {d.id})
        pipe.pexpire(self.key(d.id), max(1, ttl_ms))
        self.set_expiry(keys=[sync_key, *(self.key(i) for i in ids)], client=pipe)

    def forget(self, pipe: Pipeline, did: str) -> None:
        """Queue dropping ``did`` from the due set and the state indexes (record gone)."""
        pipe.zrem(due_key(self.prefix), did)
        for s in INDEXED:
            pipe.zrem(self.state_key(s), did)

    def get(self, did: str) -> Delivery | None:
        raw = self.client.hgetall(self.key(did))
        return Delivery.from_reply(did, raw) if raw else None

    def many(self, ids: Iterable[str]) -> list[Delivery]:
        ids = list(ids)
        pipe = self.client.pipeline(transaction=False)
        for did in ids:
            pipe.hgetall(self.key(did))
        return [
            Delivery.from_reply(did, raw)
            for did, raw in zip(ids, pipe.execute(), strict=True)
            if raw
        ]

    def for_syncs(self, connector_id: str, sync_ids: Iterable[str]) -> dict[str, list[Delivery]]:
        """Return each sync's deliveries, sorted by URI (one round trip per batch)."""
        sync_ids = list(dict.fromkeys(sync_ids))
        pipe = self.client.pipeline(transaction=False)
        for sid in sync_ids:
            pipe.smembers(sync_deliveries_key(self.prefix, connector_id, sid))
        members = pipe.execute()
        ids = sorted({as_text(m) for ms in members for m in ms})
        by_id = {d.id: d for d in self.many(ids)}
        out: dict[str, list[Delivery]] = {}
        for sid, ms in zip(sync_ids, members, strict=True):
            found = [by_id[as_text(m)] for m in ms if as_text(m) in by_id]
            out[sid] = sorted(found, key=lambda d: d.uri)
        return out

    def recent(
        self, limit: int = 100, state: DeliveryState | None = None, scan_limit: int = 100_000
    ) -> list[Delivery]:
        """Return the newest deliveries (of one state), newest first."""
        if state in INDEXED:
            assert state is not None
            ids = [as_text(m) for m in self.client.zrevrange(self.state_key(state), 0, limit - 1)]
            return [d for d in self.many(ids) if d.state is state]
        out: list[Delivery] = []
        start = 0
        page = max(limit, 200)
        while len(out) < limit and start < scan_limit:
            ids = [
                as_text(m)
                for m in self.client.zrevrange(deliveries_key(self.prefix), start, start + page - 1)
            ]
            if not ids:
                break
            out += [d for d in self.many(ids) if state is None or d.state is state]
            start += page
        return out[:limit]

    def given_up(self) -> list[str]:
        return [as_text(m) for m in self.client.zrange(undelivered_key(self.prefix), 0, -1)]


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
