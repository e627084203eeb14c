"""URLs of the connector pages the plugin's UI serves, and the sensor's extra link to them.

The UI is a FastAPI app the ``AirflowPlugin`` mounts at ``/fivetran-events``: the list of
connectors at ``/fivetran-events/``, one connector's syncs at
``/fivetran-events/connectors/{connector_id}`` with optional query parameters ``target``
(ISO 8601), ``criterion``, ``propagate_failures_forward`` and ``always_wait_when_syncing``.
``connector_view_url`` is the one place that spells those URLs, so the sensor's link and
the UI cannot drift apart.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from fivetran_events.timeutil import iso

#: Where the plugin mounts its UI (the FastAPI app's ``url_prefix``).
UI_PREFIX = "/fivetran-events"
#: The list of every connector.
CONNECTORS_LIST_URL = f"{UI_PREFIX}/"
#: The query parameters a connector's page understands besides ``target``.
VIEW_FLAGS = ("criterion", "propagate_failures_forward", "always_wait_when_syncing")


def connector_view_url(connector_id: str, target: datetime | None = None, **flags: Any) -> str:
    """Return the relative URL of ``connector_id``'s page, opened at ``target``.

    ``flags`` are the decision's options (``criterion``, ``propagate_failures_forward``,
    ``always_wait_when_syncing``) so the page judges the target as the sensor does; None
    leaves one out. Any other name is a TypeError: a misspelt flag would silently show
    a different decision than the sensor's.
    """
    unknown = sorted(set(flags) - set(VIEW_FLAGS))
    if unknown:
        raise TypeError(f"unknown connector view flag(s) {unknown}; known: {list(VIEW_FLAGS)}")
    query: dict[str, str] = {}
    if target is not None:
        query["target"] = str(iso(target))
    for name in VIEW_FLAGS:
        value = flags.get(name)
        if value is not None:
            query[name] = str(value).lower() if isinstance(value, bool) else str(value)
    path = f"{UI_PREFIX}/connectors/{quote(connector_id, safe='')}"
    return f"{path}?{urlencode(query)}" if query else path
