"""Build an asset event's ``extra`` for one successful sync, from the history.

Both ways a success reaches Airflow send the same ``extra``: the REST forwarder (the
webhook app's worker, over a sync Redis client) and the Airflow watcher
(``airflow_plugin.triggers.watcher``, in the triggerer's event loop over ``redis.asyncio``).
So the assembly lives here, in the core both sides import, split sans-io: the history
reader's ``extra_commands``/``resync_commands`` put the reads on a pipeline, ``assemble``
turns the replies into the dict, and ``extra_for``/``aextra_for`` are the two thin drivers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .history import decode_completion
from .history.reader import ConnectorRecord, decode_resyncs, extra_commands, resync_commands
from .keys import ConnectorKeys
from .timeutil import iso

#: What ``extra["source"]`` says, so a consumer can tell our events from others.
SOURCE = "fivetran-events"


@dataclass(frozen=True)
class SyncRef:
    """The successful sync an event is about, and the connector metadata to name it."""

    connector_id: str
    sync_id: str
    ended_ms: int
    status: str | None = "SUCCESSFUL"
    connector_name: str | None = None
    connector_type: str | None = None
    group_id: str | None = None

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> SyncRef:
        """Read a delivery record's fields (empty strings mean unknown)."""
        return cls(
            connector_id=fields["connector_id"],
            sync_id=fields["sync_id"],
            ended_ms=int(fields["ended_ms"]),
            status=fields.get("status") or None,
            connector_name=fields.get("connector_name") or None,
            connector_type=fields.get("connector_type") or None,
            group_id=fields.get("group_id") or None,
        )

    @classmethod
    def from_record(cls, record: ConnectorRecord, sync_id: str, ended_ms: int) -> SyncRef:
        """Name a success read from the history with its connector's record."""
        return cls(
            connector_id=record.connector_id,
            sync_id=sync_id,
            ended_ms=ended_ms,
            connector_name=record.name,
            connector_type=record.type,
            group_id=record.group,
        )


def assemble(
    ref: SyncRef, same_end: Sequence[Any], first_start: Any, resync_members: Sequence[Any]
) -> dict[str, Any]:
    """Turn the replies of both round trips into the event's ``extra``."""
    # The success's own record carries the start of the attempt that succeeded (a
    # retried sync id has several); the sync's first start is the fallback.
    started = next(
        (
            c.started_ms
            for c in (decode_completion(m, s) for m, s in same_end)
            if c.sync_id == ref.sync_id and c.started_ms is not None
        ),
        first_start,
    )
    resyncs = decode_resyncs(resync_members)
    whole = any(r.get("e") == "resync_connector" for r in resyncs)
    tables = sorted(
        {t for r in resyncs if r.get("e") == "resync_table" for t in r.get("tables") or []}
    )
    extra: dict[str, Any] = {
        "source": SOURCE,
        "connector_id": ref.connector_id,
        "connector_name": ref.connector_name,
        "connector_type": ref.connector_type,
        "group_id": ref.group_id,
        "sync_id": ref.sync_id,
        "status": ref.status,
        "started_at": iso(int(started)) if started is not None else None,
        "ended_at": iso(ref.ended_ms),
        # The first success after a resync rewrote the data: consumers may need to
        # rebuild rather than append. resync_table names the tables it concerned.
        "full_refresh": bool(resyncs),
    }
    if tables and not whole:
        extra["full_refresh_tables"] = tables
    return extra


def extra_for(client: Any, prefix: str, ref: SyncRef) -> dict[str, Any]:
    """Build ``extra`` over a sync ``redis.Redis`` (two pipelined round trips)."""
    keys = ConnectorKeys(prefix, ref.connector_id)
    pipe = client.pipeline(transaction=False)
    extra_commands(pipe, keys, ref.sync_id, ref.ended_ms)
    same_end, first_start, previous = pipe.execute()
    pipe = client.pipeline(transaction=False)
    resync_commands(pipe, keys, ref.ended_ms, previous)
    (resyncs,) = pipe.execute()
    return assemble(ref, same_end, first_start, resyncs)


async def aextra_for(client: Any, prefix: str, ref: SyncRef) -> dict[str, Any]:
    """Build ``extra`` over a ``redis.asyncio.Redis``: the same reads, awaited."""
    keys = ConnectorKeys(prefix, ref.connector_id)
    pipe = client.pipeline(transaction=False)
    extra_commands(pipe, keys, ref.sync_id, ref.ended_ms)
    same_end, first_start, previous = await pipe.execute()
    pipe = client.pipeline(transaction=False)
    resync_commands(pipe, keys, ref.ended_ms, previous)
    (resyncs,) = await pipe.execute()
    return assemble(ref, same_end, first_start, resyncs)
