"""What DAG authors use by name: connectors' assets, template macros, the ``AirflowPlugin``.

``connector_asset`` builds a connector's asset with the function the forwarder posts
events with, so the two cannot drift apart. The plugin adds the macros and, on Airflow
3.3+, mounts the "Fivetran syncs" view (``ui/``); operators and sensors are not registered.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fivetran_events.timeutil import now_ms, to_ms
from fivetran_events.uris import dataset_uri

from .compat import AIRFLOW_V_3_3, AirflowPlugin, Asset
from .hooks import DEFAULT_CONN_ID, FivetranEventsRedisHook
from .targets import as_datetime
from .ui import URL_PREFIX, LazyApp


def asset_uri(connector_id: str, template: str | None = None) -> str:
    """Return the connector's asset URI, from ``template`` or as the worker makes it."""
    return dataset_uri(connector_id, template=template) if template else dataset_uri(connector_id)


def connector_asset(connector_id: str, template: str | None = None, **asset_kwargs: Any) -> Asset:
    """Return the asset the forwarder updates when ``connector_id`` syncs successfully."""
    return Asset(uri=asset_uri(connector_id, template), **asset_kwargs)


def connector_assets(*connector_ids: str, template: str | None = None) -> list[Asset]:
    """Return the assets of several connectors (a DAG waiting on all of them)."""
    return [connector_asset(c, template) for c in connector_ids]


def last_successful_sync(
    connector_id: str, as_of: datetime | str | None = None, redis_conn_id: str = DEFAULT_CONN_ID
) -> dict[str, Any] | None:
    """Return the newest successful sync that ended at or before ``as_of`` (default: now)."""
    at_ms = now_ms() if as_of is None else to_ms(as_datetime(as_of))
    found = FivetranEventsRedisHook(redis_conn_id).last_success(connector_id, at_ms)
    return found.to_dict() if found is not None else None


class FivetranEventsPlugin(AirflowPlugin):
    name = "fivetran_events"
    macros = [last_successful_sync, asset_uri]  # noqa: RUF012 (AirflowPlugin's own shape)
    # The view needs Airflow 3's FastAPI plugin apps and the auth dependencies of 3.3.
    if AIRFLOW_V_3_3:
        fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "Fivetran syncs"}]
        # url_route: the UI shows the view inside its own frame at /plugin/fivetran-syncs.
        external_views = [
            {
                "name": "Fivetran syncs",
                "href": f"{URL_PREFIX}/",
                "destination": "nav",
                "category": "browse",
                "url_route": "fivetran-syncs",
            }
        ]
