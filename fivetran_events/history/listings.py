"""The history shaped for people: the read API's and the CLI's listings.

Not part of the decision: these walk a page of a connector's completions or every known
connector, and return JSON-ready dicts.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from ..decision import Lifecycle, RunningSync
from ..keys import ConnectorKeys, connectors_key
from ..redis_url import as_text
from .codec import decode_completion


def syncs(
    client: redis.Redis,
    prefix: str,
    connector_id: str,
    running_from: int,
    since_ms: int | None = None,
    until_ms: int | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """List the connector's syncs, newest first: completions, and running ones on top.

    A running sync that started before ``running_from`` is listed as STALE.
    """
    keys = ConnectorKeys(prefix, connector_id)
    lo = "-inf" if since_ms is None else since_ms
    hi = "+inf" if until_ms is None else until_ms
    pipe = client.pipeline(transaction=False)
    # Completions live in three sets by outcome: the newest ``limit`` of each cover the
    # newest ``limit`` of all.
    for key in (keys.ok, keys.fail, keys.other, keys.running):
        pipe.zrevrangebyscore(key, hi, lo, start=0, num=limit, withscores=True)
    *ends, running = pipe.execute()
    completions = [decode_completion(m, s) for rows in ends for m, s in rows]
    rows: list[tuple[int, dict[str, Any]]] = []
    for member, score in running:
        item = RunningSync(as_text(member), int(score)).to_dict()
        if score < running_from:
            item["status"] = "STALE"
            item["reason"] = "no sync_end within the maximum sync duration"
        rows.append((int(score), item))
    rows += [(c.ended_ms, c.to_dict()) for c in completions]
    rows.sort(key=lambda r: r[0], reverse=True)
    return [item for _, item in rows[:limit]]


def connectors(client: redis.Redis, prefix: str, running_from: int) -> list[dict[str, Any]]:
    """List known connectors with their last success, last failure, running sync and
    lifecycle (paused, deleted, broken: ``decision.Lifecycle``).

    Only a sync that started at or after ``running_from`` counts as running.
    """
    raw = {as_text(k): v for k, v in client.hgetall(connectors_key(prefix)).items()}
    ids = sorted(raw)
    pipe = client.pipeline(transaction=False)
    for cid in ids:
        keys = ConnectorKeys(prefix, cid)
        pipe.zrevrange(keys.ok, 0, 0, withscores=True)
        pipe.zrevrange(keys.fail, 0, 0, withscores=True)
        pipe.zrevrangebyscore(keys.running, "+inf", running_from, start=0, num=1, withscores=True)
    replies = pipe.execute()
    out = []
    for i, cid in enumerate(ids):
        ok, fail, running = replies[3 * i : 3 * i + 3]
        meta = json.loads(raw[cid])
        out.append(
            {
                "connector_id": cid,
                "connector_name": meta.get("name"),
                "connector_type": meta.get("type"),
                "group_id": meta.get("group"),
                "last_event_at": meta.get("last_event_at"),
                "last_success": decode_completion(*ok[0]).to_dict() if ok else None,
                "last_failure": decode_completion(*fail[0]).to_dict() if fail else None,
                "running": (
                    RunningSync(as_text(running[0][0]), int(running[0][1])).to_dict()
                    if running
                    else None
                ),
                "lifecycle": Lifecycle.from_meta(meta).to_dict(),
            }
        )
    return out
