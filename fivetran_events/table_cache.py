"""A connection's enabled destination tables, read from Fivetran into the cache.

Two calls per connection (``GET /v1/connections/{id}/schemas`` and the destination,
``GET /v1/destinations/{group}``), at most once per ``tables_refresh_hours`` unless an
event says the tables may have changed (``STALE_EVENTS``: ``mark_stale`` drops the
freshness mark, the list itself stays in use until the refresh). The worker refreshes
it before it expands a sync's table-level delivery (``forwarding/tables.py``) and
``datasets check`` before it lists the tables, so the webhook never calls Fivetran.
"""

from __future__ import annotations

import redis

from .destinations import (
    STALE_EVENTS,
    DestinationTable,
    name_table,
    store_tables,
    templated,
)
from .fivetran_api import FivetranClient
from .fivetran_records import enabled_tables
from .settings import Settings
from .timeutil import now_ms

__all__ = ["STALE_EVENTS", "refresh"]

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
