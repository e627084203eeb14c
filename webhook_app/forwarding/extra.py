"""The ``extra`` an Airflow event carries: the sync, its start and whether it was a resync."""

from __future__ import annotations

import json
from typing import Any

import redis

from fivetran_events import Settings, decode_completion
from fivetran_events.keys import ConnectorKeys
from fivetran_events.timeutil import iso

from .record import Delivery, text


def build_extra(client: redis.Redis, settings: Settings, d: Delivery) -> dict[str, Any]:
    """Build the event's ``extra`` from the delivery and the connector's history."""
    cid = d.fields["connector_id"]
    sid = d.fields["sync_id"]
    ended = int(d.fields["ended_ms"])
    keys = ConnectorKeys(settings.key_prefix, cid)
    pipe = client.pipeline(transaction=False)
    pipe.zrangebyscore(keys.ok, ended, ended)
    pipe.zscore(keys.starts, sid)
    pipe.zrevrangebyscore(keys.ok, f"({ended}", "-inf", start=0, num=1, withscores=True)
    same_end, first_start, previous = pipe.execute()
    # The success's own record carries the start of the attempt that succeeded (a
    # retried sync id has several); the sync's first start is the fallback.
    started = next(
        (
            c.started_ms
            for c in map(decode_completion, same_end)
            if c.sync_id == sid and c.started_ms is not None
        ),
        first_start,
    )
    since = f"({int(previous[0][1])}" if previous else "-inf"
    resyncs = [json.loads(text(m)) for m in client.zrangebyscore(keys.resyncs, since, ended)]
    whole = any(r.get("e") == "resync_connector" for r in resyncs)
    tables = sorted(
        {t for r in resyncs if r.get("e") == "resync_table" for t in r.get("tables") or []}
    )
    extra: dict[str, Any] = {
        "source": "fivetran-events",
        "connector_id": cid,
        "connector_name": d.get("connector_name"),
        "connector_type": d.get("connector_type"),
        "group_id": d.get("group_id"),
        "sync_id": sid,
        "status": d.get("status"),
        "started_at": iso(int(started)) if started is not None else None,
        "ended_at": iso(ended),
        # The first success after a resync rewrote the data: consumers may need to
        # rebuild rather than append. resync_table names the tables it concerned.
        "full_refresh": bool(resyncs),
    }
    if tables and not whole:
        extra["full_refresh_tables"] = tables
    return extra
