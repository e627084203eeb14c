"""A sync's table-level delivery, expanded into one delivery per consumed table (with
partitions, per consumed table and completed period). The webhook's write does not grow with
the table count: the attempt asks Airflow once which tables are assets and creates a delivery
per consumed table in one MULTI (run again, only what is missing)."""

from __future__ import annotations

import json
import logging
from typing import Any

from fivetran_events.deliveries import (
    Delivery,
    DeliveryKind,
    DeliveryState,
    Field,
    SyncRef,
    extra_for,
)
from fivetran_events.destinations import DestinationTable, current
from fivetran_events.exceptions import FivetranApiError, FivetranUnavailable
from fivetran_events.fivetran_api import FivetranClient

from ..airflow_client import AirflowClient
from ..exceptions import AirflowRejected, AirflowUnavailable
from .partitions import Partitioner
from .recorder import AttemptResult, Recorder, retry_at
from .sweeper import Sweeper

log = logging.getLogger(__name__)

#: Why a table-level delivery fails without a table list.
NO_TABLE_LIST = (
    "no table list: set FIVETRAN_EVENTS_FIVETRAN_API_KEY and _SECRET so the "
    "worker can read the connection's schema configuration"
)


def table_extra(sync_extra: dict[str, Any], t: DestinationTable) -> dict[str, Any]:
    """The sync's ``extra`` for one table: ``full_refresh`` only if a ``resync_connector``
    or a ``resync_table`` of this table came before the sync (pure)."""
    out = {k: v for k, v in sync_extra.items() if k != "full_refresh_tables"}
    named = sync_extra.get("full_refresh_tables")
    if named is not None:
        out["full_refresh"] = t.table in named or f"{t.schema}.{t.table}" in named
    out.update(schema=t.schema, table=t.table, dataset_namespace=t.namespace, dataset_name=t.name)
    return out


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


class TablesSender:
    """Expand a sync's table-level delivery into one asset delivery per consumed table."""

    def __init__(
        self,
        recorder: Recorder,
        airflow: AirflowClient,
        sweeper: Sweeper,
        fivetran: FivetranClient | None,
        partitioner: Partitioner | None = None,
    ) -> None:
        self.recorder = recorder
        self.airflow = airflow
        self.sweeper = sweeper
        self.fivetran = fivetran
        #: With FIVETRAN_EVENTS_PARTITION_GRAIN: each consumed table's partitions too.
        self.partitioner = partitioner

    def not_before(self, d: Delivery) -> int | None:
        return retry_at(d)

    def send(self, d: Delivery) -> AttemptResult:
        r = self.recorder
        try:
            tables = current(
                r.redis,
                r.settings,
                self.fivetran,
                d.fields[Field.CONNECTOR_ID],
                d.get(Field.GROUP_ID),
            )
            if tables is None:
                return r.give_up(d, DeliveryState.FAILED, NO_TABLE_LIST)
            uris = [t.uri for t in tables]
            known = self.airflow.assets_under(common_prefix(uris)) if tables else {}
            p = self.partitioner
            refusal = p.refused() if p is not None else None
        except (FivetranUnavailable, AirflowUnavailable) as exc:
            return r.retry(d, exc)
        except (FivetranApiError, AirflowRejected) as exc:
            return r.give_up(d, DeliveryState.FAILED, str(exc))
        consumed = [t for t in tables if t.uri in known]
        sync = SyncRef.from_fields(d.fields)
        sync_extra = extra_for(r.redis, r.settings.key_prefix, sync)
        extras = {t.uri: json.dumps(table_extra(sync_extra, t), sort_keys=True) for t in consumed}
        keys = p.completed(sync).keys if p is not None and refusal is None and consumed else ()
        names = {t.uri: f"{t.schema}.{t.table}" for t in consumed}
        with r.redis.pipeline(transaction=True) as pipe:
            targets = [(t.uri, DeliveryKind.ASSET) for t in consumed]
            r.store.create(sync, targets, r.clock(), pipe, extras=extras, tables=names)
            if keys and p is not None:
                p.create(pipe, sync, keys, [t.uri for t in consumed], extras)
            pipe.execute()
        counts = f"{len(consumed)}/{len(tables)}"
        note = f"{counts} tables have an asset in Airflow, forwarded" + (
            f"; no partitions: {refusal}" if refusal else ""
        )
        result = r.delivered(d, {Field.TABLES: counts}, note, reason=f"tables {counts}")
        # Queued now rather than at the sweeper's wake-up: this worker is awake already.
        self.sweeper.sweep_backlog()
        return result
