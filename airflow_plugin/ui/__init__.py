"""The "Fivetran syncs" view: every connector's syncs and decisions in Airflow's UI.

A FastAPI app (``app.py`` routes, ``queries.py`` reads, ``render.py`` draws) mounted in
Airflow's API server (3.3+) under ``URL_PREFIX``, and the links to it, built by one
function so the extra link, a log line and the view agree on its URLs.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from fivetran_events.decision import FLAGS
from fivetran_events.timeutil import iso

from ..compat import BaseOperatorLink
from ..targets import resolve_target

log = logging.getLogger(__name__)

#: Where the AirflowPlugin mounts the view's FastAPI app in Airflow's API server.
URL_PREFIX = "/fivetran-events"
CONNECTORS_LIST_URL = f"{URL_PREFIX}/"


class LazyApp:
    """An ASGI app building the view on its first request: task processes import this too."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            from .app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


def connector_view_url(connector_id: str, target: datetime | None = None, **flags: Any) -> str:
    """Return the relative URL of a connector's page at ``target``, with ``flags``."""
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
    """Prefix ``relative`` with the path of Airflow's ``[api] base_url`` (a proxy's
    sub-path such as ``https://host/airflow`` holds the plugin's UI too)."""
    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="") or ""
    return f"{urlsplit(base).path.rstrip('/')}{relative}"


class FivetranConnectorLink(BaseOperatorLink):
    """Open the sensor's connector in the fivetran-events UI, at the run's target (Airflow 2
    computes links in the webserver, without the run's context: no target)."""

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
                # A sensor from before wait_when_paused/broken decides as if it were False.
                **{
                    f: getattr(operator, f, False if f.startswith("wait_when_") else None)
                    for f in FLAGS
                },
            )
        )
