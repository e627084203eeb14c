"""fivetran-events as an Airflow provider: what ``get_provider_info`` tells Airflow.

Registered through the ``apache_airflow_provider`` entry point, as Airflow's own
providers are, so ``airflow providers list`` shows it and the connection UI offers the
``fivetran_events`` connection type with its form. It imports nothing from Airflow
(see ``connection_form``). The plugin is listed here and also keeps its
``airflow.plugins`` entry point, as Airflow's own providers with plugins do: Airflow
loads providers' plugins only with ``[core] lazy_discover_providers = False``, and the
entry point covers the default and Airflow 2.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from .connection_form import CONN_FIELDS, CONN_TYPE, UI_FIELD_BEHAVIOUR

PACKAGE_NAME = "fivetran-events"
INTEGRATION = "Fivetran events"


def _version() -> str:
    try:
        return version(PACKAGE_NAME)
    except PackageNotFoundError:  # a source checkout that was never installed
        from fivetran_events import __version__

        return __version__


def get_provider_info() -> dict[str, Any]:
    """Return the provider's description in the shape of Airflow's provider_info schema."""
    behaviour = UI_FIELD_BEHAVIOUR
    return {
        "package-name": PACKAGE_NAME,
        "name": "Fivetran events",
        "description": "Fivetran syncs from a webhook-recorded history in Redis: a sensor "
        "that decides without polling Fivetran, its deferrable trigger, and asset helpers.",
        "versions": [_version()],
        "integrations": [{"integration-name": INTEGRATION, "tags": ["service"]}],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["airflow_plugin.hooks"]}],
        "sensors": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_plugin.sensors"]}
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_plugin.operators", "airflow_plugin.sync_operators"],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_plugin.triggers",
                    "airflow_plugin.event_triggers",
                    "airflow_plugin.sync_trigger",
                ],
            }
        ],
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": "airflow_plugin.hooks.FivetranEventsRedisHook",
                "hook-name": "Fivetran events history (Redis)",
                "conn-fields": CONN_FIELDS,
                "ui-field-behaviour": {
                    "hidden-fields": list(behaviour["hidden_fields"]),
                    "relabeling": dict(behaviour["relabeling"]),
                    "placeholders": dict(behaviour["placeholders"]),
                },
            }
        ],
        "extra-links": ["airflow_plugin.links.FivetranConnectorLink"],
        "plugins": [
            {
                "name": "fivetran_events",
                "plugin-class": "airflow_plugin.plugin.FivetranEventsPlugin",
            }
        ],
    }
