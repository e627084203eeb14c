"""The Airflow asset (dataset on Airflow 2) of a connector, for ``schedule=[...]``.

Built with ``fivetran_events.uris.dataset_uri``, the function the forwarder posts
events with, so DAG authors never type a URI by hand and the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from fivetran_events.uris import dataset_uri

from .compat import Asset


def asset_uri(connector_id: str, template: str | None = None) -> str:
    """Return the connector's asset URI (the one the forwarder posts events for).

    Without ``template`` it is the configured one (``FIVETRAN_EVENTS_DATASET_URI_TEMPLATE``
    and mapping file, read from ``FIVETRAN_EVENTS_*`` exactly as the worker reads them).
    Also the plugin's macro ``{{ macros.fivetran_events.asset_uri(...) }}``.
    """
    return dataset_uri(connector_id, template=template) if template else dataset_uri(connector_id)


def connector_asset(connector_id: str, template: str | None = None, **asset_kwargs: Any) -> Asset:
    """Return the asset the forwarder updates when ``connector_id`` syncs successfully."""
    return Asset(uri=asset_uri(connector_id, template), **asset_kwargs)


def connector_assets(*connector_ids: str, template: str | None = None) -> list[Asset]:
    """Return the assets of several connectors (a DAG waiting on all of them)."""
    return [connector_asset(c, template) for c in connector_ids]
