"""The dataset (Airflow 3: asset) URI of a connector, shared by the forwarder and the plugin.

One function, so the URI the forwarder posts events for and the URI a DAG schedules on
can never drift apart.
"""

from __future__ import annotations

#: The URI template used when no mapping says otherwise.
DEFAULT_URI_TEMPLATE = "fivetran://connector/{connector_id}"


def dataset_uri(connector_id: str, template: str = DEFAULT_URI_TEMPLATE) -> str:
    """Return the dataset URI of ``connector_id`` built from ``template``."""
    if not connector_id:
        raise ValueError("connector_id must not be empty")
    return template.format(connector_id=connector_id)
