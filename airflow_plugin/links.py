"""URLs of the "Fivetran syncs" view that the plugin's FastAPI app serves in Airflow 3.3+.

One function builds them, so an extra link, a task log line and the view itself agree
on the URL contract: the list of connectors is ``/fivetran-events/``, one connector's
page ``/fivetran-events/connectors/{connector_id}`` with the optional query parameters
``target`` (ISO 8601), ``criterion``, ``propagate_failures_forward``,
``always_wait_when_syncing`` and ``wait_when_paused``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from fivetran_events.timeutil import iso

#: Where the AirflowPlugin mounts the view's FastAPI app in Airflow's API server.
URL_PREFIX = "/fivetran-events"
#: The list of every connector.
CONNECTORS_LIST_URL = f"{URL_PREFIX}/"
#: The decision flags the page takes, as the sensor names them.
FLAGS = (
    "criterion",
    "propagate_failures_forward",
    "always_wait_when_syncing",
    "wait_when_paused",
)


def connector_view_url(connector_id: str, target: datetime | None = None, **flags: Any) -> str:
    """Return the relative URL of one connector's page, showing the decision for ``target``.

    ``flags`` are the sensor's decision flags (``FLAGS``); booleans are written as
    ``true``/``false``, ``None`` leaves a flag at the page's default.
    """
    unknown = sorted(set(flags) - set(FLAGS))
    if unknown:
        raise TypeError(f"unknown flag(s) {', '.join(unknown)}; expected some of {FLAGS}")
    params: dict[str, str] = {}
    if target is not None:
        params["target"] = str(iso(target))
    for name in FLAGS:
        value = flags.get(name)
        if value is None:
            continue
        if isinstance(value, bool):
            params[name] = "true" if value else "false"
        else:
            params[name] = str(getattr(value, "value", value))
    path = f"{URL_PREFIX}/connectors/{quote(connector_id, safe='')}"
    return f"{path}?{urlencode(params)}" if params else path
