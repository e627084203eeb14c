"""A sync's table-level delivery, expanded into one delivery per consumed table.

With ``FIVETRAN_EVENTS_ASSET_GRANULARITY`` = ``table`` or ``both``, the webhook creates
one delivery per sync for all its tables (``enqueue.tables_uri``), so what it writes
does not grow with the table count and it never reads a table list. Its attempt, here:

1. refreshes the connector's table list from Fivetran if it is not fresh
   (``table_cache``; a stale list is used while Fivetran cannot be reached);
2. asks Airflow once which of the tables' URIs are assets (one paged listing under their
   common prefix, ``AirflowClient.assets_under``): a table no DAG uses has no asset, and
   its POST would only be a 404 to record;
3. creates, in one MULTI, a delivery per consumed table (each exactly once per (sync,
   URI), as any delivery: created unless it exists) with its ``extra`` (the sync's, with
   ``schema``, ``table`` and ``full_refresh`` for that table alone), due now; the workers
   POST them concurrently, as many at a time as the pool has processes;
4. records itself delivered with the counts (``tables``: forwarded/enabled).

Each table's record, once delivered, stays an hour (``attempt.table_keep_ms``), not
the keep time: this delivery, which stays the keep time, is what a late redelivery, a
reconcile or a replay finds, so per sync only it outlives the hour.

Run again after a crash, it creates only what is missing.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from fivetran_events.asset_extra import SyncRef
from fivetran_events.deliveries import Delivery, DeliveryState
from fivetran_events.destinations import DestinationTable
from fivetran_events.exceptions import FivetranApiError, FivetranUnavailable
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.table_cache import current

from ..airflow_errors import AirflowRejected, AirflowUnavailable
from . import attempt as _attempt
from .attempt import AttemptOutcome, AttemptResult, Parts
from .enqueue import TABLES_SCHEME, Enqueuer

log = logging.getLogger(__name__)


class TableParts(Parts, Protocol):
    """An attempt's parts, plus what an expansion needs: ``worker.Forwarder``."""

    enqueuer: Enqueuer
    fivetran: FivetranClient | None

    def sweep_backlog(self) -> int: ...


def is_tables_delivery(d: Delivery) -> bool:
    return d.uri.startswith(TABLES_SCHEME)


def table_extra(sync_extra: dict[str, Any], t: DestinationTable) -> dict[str, Any]:
    """The sync's ``extra`` for one table: ``full_refresh`` only if a ``resync_connector``
    or a ``resync_table`` of this table came before the sync (pure)."""
    out = {k: v for k, v in sync_extra.items() if k != "full_refresh_tables"}
    named = sync_extra.get("full_refresh_tables")
    if named is not None:
        out["full_refresh"] = t.table in named or f"{t.schema}.{t.table}" in named
    out.update(schema=t.schema, table=t.table, dataset_namespace=t.namespace, dataset_name=t.name)
    return out


def _tables(fw: TableParts, d: Delivery) -> list[DestinationTable] | None:
    return current(fw.redis, fw.settings, fw.fivetran, d.fields["connector_id"], d.get("group_id"))


def common_prefix(uris: list[str]) -> str:
    """The longest prefix of every URI, cut after its last '/' or '.' (a listing's filter)."""
    prefix = uris[0] if uris else ""
    for u in uris[1:]:
        n = 0
        while n < min(len(prefix), len(u)) and prefix[n] == u[n]:
            n += 1
        prefix = prefix[:n]
    cut = max(prefix.rfind("/"), prefix.rfind("."))
    return prefix[: cut + 1] if cut >= 0 and len(uris) > 1 else prefix


def expand(fw: TableParts, d: Delivery) -> AttemptResult:
    """Make ``d``'s attempt: create its sync's per-table deliveries (see the module)."""
    assert fw.airflow is not None
    try:
        tables = _tables(fw, d)
    except FivetranUnavailable as exc:
        return _attempt._retry(fw, d, exc, None)
    except FivetranApiError as exc:
        return _attempt._give_up(fw, d, DeliveryState.FAILED, str(exc), clear_mark=True)
    if tables is None:
        reason = (
            "no table list: set FIVETRAN_EVENTS_FIVETRAN_API_KEY and _SECRET so the "
            "worker can read the connection's schema configuration"
        )
        return _attempt._give_up(fw, d, DeliveryState.FAILED, reason, clear_mark=True)
    try:
        known = fw.airflow.assets_under(common_prefix([t.uri for t in tables])) if tables else {}
    except AirflowUnavailable as exc:
        return _attempt._retry(fw, d, exc, None)
    except AirflowRejected as exc:
        return _attempt._give_up(fw, d, DeliveryState.FAILED, str(exc), clear_mark=True)
    consumed = [t for t in tables if t.uri in known]
    sync = SyncRef.from_fields(d.fields)
    sync_extra = _attempt.build_extra(fw, d)
    now = fw.clock()
    with fw.redis.pipeline(transaction=True) as pipe:
        ids = fw.enqueuer.create_many(sync, [t.uri for t in consumed], now, pipe)
        for did, t in zip(ids, consumed, strict=True):
            extra = json.dumps(table_extra(sync_extra, t), sort_keys=True)
            pipe.hsetnx(fw.store.key(did), "extra", extra)
            pipe.hsetnx(fw.store.key(did), "table", f"{t.schema}.{t.table}")
        pipe.execute()
    counts = f"{len(consumed)}/{len(tables)}"
    _attempt._finish(
        fw, d, DeliveryState.DELIVERED, {"tables": counts}, ["reason", "next_attempt_ms"]
    )
    # Queued now rather than at the sweeper's wake-up: this worker is awake already.
    fw.sweep_backlog()
    log.info("delivery %s: %s tables have an asset in Airflow, forwarded", d.id, counts)
    return AttemptResult(d.id, AttemptOutcome.DELIVERED, reason=f"tables {counts}")
