"""The sensor's extra link: the connector's page in the plugin's UI, at the run's target.

Airflow 3 computes an extra link in the task's own process when the task ends and keeps
it as an XCom (the API server only reads it back), so ``get_link`` sees the rendered
sensor, its resolved connector id and the run's context: the link names the target the
sensor judged, with the same flags. Airflow 2 computes it in the webserver from a
TaskInstanceKey, without a context: the link then opens the connector without a target.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from .compat import BaseOperatorLink
from .links import CONNECTORS_LIST_URL, connector_view_url
from .targets import resolve_target

log = logging.getLogger(__name__)


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
                criterion=getattr(operator, "criterion", None),
                propagate_failures_forward=getattr(operator, "propagate_failures_forward", None),
                always_wait_when_syncing=getattr(operator, "always_wait_when_syncing", None),
                # A sensor from before wait_when_paused decides as if it were False.
                wait_when_paused=getattr(operator, "wait_when_paused", False),
            )
        )
