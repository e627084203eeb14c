"""A connection's enabled destination tables, read from Fivetran into the cache.

Two calls per connection (``GET /v1/connections/{id}/schemas`` and the destination,
``GET /v1/destinations/{group}``), at most once per ``tables_refresh_hours`` unless an
event says the tables may have changed (``STALE_EVENTS``: ``mark_stale`` drops the
freshness mark, the list itself stays in use until the refresh). The worker refreshes
it before it expands a sync's table-level delivery (``forwarding/tables.py``) and
``datasets check`` before it lists the tables, so the webhook never calls Fivetran.
"""

from __future__ import annotations

import logging

import redis

from .destinations import (
    STALE_EVENTS,
    DestinationTable,
    destination_tables,
    name_table,
    store_tables,
    tables_fresh,
    templated,
)
from .exceptions import FivetranApiError
from .fivetran_api import FivetranClient
from .fivetran_records import enabled_tables
from .settings import Settings
from .timeutil import now_ms

__all__ = ["STALE_EVENTS", "current", "refresh"]

log = logging.getLogger(__name__)

#: How long a list is kept past its freshness: used while Fivetran cannot be reached.
KEEP_S = 7 * 86_400


def refresh(
    client: redis.Redis,
    settings: Settings,
    fivetran: FivetranClient,
    connector_id: str,
    group_id: str | None = None,
) -> list[DestinationTable]:
    """Read ``connector_id``'s enabled tables and its destination from Fivetran, name
    them and cache them; return them. Fivetran's errors propagate (``FivetranApiError``)."""
    if not group_id:
        group_id = fivetran.connection(connector_id).group_id or ""
    destination = fivetran.destination(group_id)
    service = destination.service or ""
    named = [
        name_table(service, destination.config, schema, table, group_id=group_id)
        for schema, table in enabled_tables(fivetran.schema_config(connector_id))
    ]
    tables = templated(
        named,
        settings.table_uri_template,
        connector_id=connector_id,
        group_id=group_id,
        service=service,
    )
    fresh_s = max(1, int(settings.tables_refresh_hours * 3600))
    store_tables(
        client,
        settings.key_prefix,
        connector_id,
        tables,
        fetched_ms=now_ms(),
        fresh_s=fresh_s,
        keep_s=fresh_s + KEEP_S,
    )
    return tables


def current(
    client: redis.Redis,
    settings: Settings,
    fivetran: FivetranClient | None,
    connector_id: str,
    group_id: str | None = None,
) -> list[DestinationTable] | None:
    """``connector_id``'s cached tables, refreshed first when due and a Fivetran client is
    given; None when none are known. While Fivetran fails, a cached list is used (with a
    warning); with none cached, Fivetran's error propagates (``FivetranApiError``)."""
    prefix = settings.key_prefix
    cached = destination_tables(client, prefix, connector_id)
    if fivetran is None or (cached is not None and tables_fresh(client, prefix, connector_id)):
        return cached
    try:
        return refresh(client, settings, fivetran, connector_id, group_id)
    except FivetranApiError as exc:
        if cached is None:
            raise
        log.warning("connector %s: using its cached tables, Fivetran failed: %s", connector_id, exc)
        return cached
