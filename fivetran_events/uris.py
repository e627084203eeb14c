"""Dataset (Asset) URIs per connector, for DAG authors and the forwarding worker alike.

The webhook's worker posts events to these URIs and DAG authors schedule on them, so
both sides build them from the same settings, and nobody types a URI by hand. The map
itself (template, mapping file) is ``urimap.py``; this module adds the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .exceptions import ConfigurationError
from .settings import load_settings
from .urimap import DEFAULT_URI_TEMPLATE, UriMap, load_uri_map

__all__ = ["DEFAULT_URI_TEMPLATE", "UriMap", "dataset_uri", "dataset_uris", "load_uri_map"]


def dataset_uris(
    connector_id: str,
    connector_name: str | None = None,
    connector_type: str | None = None,
    group_id: str | None = None,
    *,
    template: str | None = None,
    mapping_file: str | Path | None = None,
    uri_map: UriMap | None = None,
) -> list[str]:
    """Return the dataset URIs of ``connector_id`` from the caller's map or configuration.

    With neither ``uri_map`` nor a template or mapping file, they come from the
    environment (``FIVETRAN_EVENTS_DATASET_URI_TEMPLATE``,
    ``FIVETRAN_EVENTS_DATASET_MAPPING_FILE``), exactly as the forwarding worker reads them.
    """
    if uri_map is None:
        if template is None and mapping_file is None:
            uri_map = load_settings().uri_map()
        else:
            uri_map = load_uri_map(template or DEFAULT_URI_TEMPLATE, mapping_file)
    return uri_map.uris(connector_id, connector_name, connector_type, group_id)


def dataset_uri(connector_id: str, **kwargs: Any) -> str:
    """Return the one URI of ``connector_id``; raise ConfigurationError if it maps to several."""
    uris = dataset_uris(connector_id, **kwargs)
    if len(uris) != 1:
        raise ConfigurationError(
            f"connector '{connector_id}' maps to {len(uris)} dataset URIs "
            f"({', '.join(uris)}): use dataset_uris()"
        )
    return uris[0]
