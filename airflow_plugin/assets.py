"""The Airflow asset (dataset on Airflow 2) of a connector, for ``schedule=[...]``.

Built with ``fivetran_events.uris.dataset_uri``, the function the forwarder posts
events with, so DAG authors never type a URI by hand and the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from fivetran_events.uris import dataset_uri

from .compat import Asset


def connector_asset(connector_id: str, template: str | None = None, **asset_kwargs: Any) -> Asset:
    """Return the asset the forwarder updates when ``connector_id`` syncs successfully.

    Without ``template`` the URI is the configured one (template and mapping file, read
    from ``FIVETRAN_EVENTS_*`` exactly as the worker reads them).
    """
    uri = dataset_uri(connector_id, template=template) if template else dataset_uri(connector_id)
    return Asset(uri=uri, **asset_kwargs)


def connector_assets(*connector_ids: str, template: str | None = None) -> list[Asset]:
    """Return the assets of several connectors (a DAG waiting on all of them)."""
    return [connector_asset(c, template) for c in connector_ids]
