"""Links to the "Fivetran syncs" view the plugin's FastAPI app serves in Airflow 3.3+.

One function builds its URLs, so the sensor's extra link, a task log line and the view
itself agree on the URL contract: the list of connectors is ``/fivetran-events/``, one
connector's page ``/fivetran-events/connectors/{connector_id}`` with the optional query
parameters ``target`` (ISO 8601), ``criterion``, ``propagate_failures_forward``,
``always_wait_when_syncing`` and ``wait_when_paused``.

The extra link (``FivetranConnectorLink``) opens that page at the run's target. Airflow 3
computes an extra link in the task's own process when the task ends and keeps it as an
XCom (the API server only reads it back), so ``get_link`` sees the rendered sensor, its
resolved connector id and the run's context: the link names the target the sensor
judged, with the same flags. Airflow 2 computes it in the webserver from a
TaskInstanceKey, without a context: the link then opens the connector without a target.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from fivetran_events.decision import FLAGS
from fivetran_events.timeutil import iso

from .compat import BaseOperatorLink
from .targets import resolve_target

log = logging.getLogger(__name__)

#: Where the AirflowPlugin mounts the view's FastAPI app in Airflow's API server.
URL_PREFIX = "/fivetran-events"
#: The list of every connector.
CONNECTORS_LIST_URL = f"{URL_PREFIX}/"


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


def under_base_url(relative: str) -> str:
    """Prefix ``relative`` with the path of Airflow's ``[api] base_url``, if it has one.

    Behind a proxy that serves Airflow at a sub-path (``https://host/airflow``) the
    plugin's UI is under that path too; a bare ``/fivetran-events/...`` would miss it.
    """
    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="") or ""
    return f"{urlsplit(base).path.rstrip('/')}{relative}"


class FivetranConnectorLink(BaseOperatorLink):
    """Open the sensor's connector in the fivetran-events UI, at the run's target."""

    name = "Fivetran syncs"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        connector_id = getattr(operator, "connector_id", None)
        if not connector_id or "{{" in str(connector_id):
            # A name that did not resolve, or an unrendered template (Airflow 2's webserver).
            return under_base_url(CONNECTORS_LIST_URL)
        target = None
        context_of = getattr(ti_key, "get_template_context", None)
        if context_of is not None:  # Airflow 3: the task's own RuntimeTaskInstance
            try:
                target, _ = resolve_target(getattr(operator, "target_time", None), context_of())
            except (TypeError, ValueError) as exc:
                log.warning("extra link without a target: %s", exc)
        return under_base_url(
            connector_view_url(
                str(connector_id),
                target,
                # A sensor from before wait_when_paused decides as if it were False.
                **{
                    f: getattr(operator, f, False if f == "wait_when_paused" else None)
                    for f in FLAGS
                },
            )
        )
