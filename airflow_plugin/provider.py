"""What ``get_provider_info`` tells Airflow (the ``apache_airflow_provider`` entry point).

It imports nothing from Airflow, which may still be importing itself when it calls this.
The plugin keeps its ``airflow.plugins`` entry point too: Airflow loads providers' plugins
only with ``[core] lazy_discover_providers = False``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

PACKAGE_NAME = "fivetran-events"
INTEGRATION = "Fivetran events"
#: The provider's connection type of the history's Redis (``fivetran-events://`` in a URI).
CONN_TYPE = "fivetran_events"
#: The connection type of Fivetran's API (``fivetran://KEY:SECRET@`` in a URI).
FIVETRAN_CONN_TYPE = "fivetran"
#: The hooks' names in the connection UI, one per connection type.
HOOK_NAME = "Fivetran events history (Redis)"
FIVETRAN_API_HOOK_NAME = "Fivetran API (fivetran-events)"

#: The provider's form for a ``fivetran_events`` connection, in the declarative shape of
#: a provider's ``conn-fields`` (stored in the connection's extras).
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "ssl": {
        "label": "TLS",
        "description": "Connect with TLS (rediss://).",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "ssl_ca_certs": {
        "label": "Private CA file",
        "description": "Path, on every Airflow worker and triggerer, of the CA that signed "
        "Redis' certificate. Empty: the system's CAs.",
        "schema": {"type": ["string", "null"]},
    },
    "key_prefix": {
        "label": "Key prefix",
        "description": "Prefix of the history's Redis keys: the webhook server's "
        "FIVETRAN_EVENTS_KEY_PREFIX (default fte:).",
        "schema": {"type": ["string", "null"]},
    },
    "sentinels": {
        "label": "Sentinels",
        "description": "Behind Redis Sentinel: host:port of each sentinel, comma-separated "
        "(port 26379 by default); host and port above are then not used.",
        "schema": {"type": ["string", "null"]},
    },
    "sentinel_service": {
        "label": "Sentinel service name",
        "description": "The name the sentinels monitor the primary under (e.g. mymaster).",
        "schema": {"type": ["string", "null"]},
    },
    "sentinel_password": {
        "label": "Sentinel password",
        "description": "The sentinels' own AUTH password, if they have one (the password "
        "above is the primary's).",
        "schema": {"type": ["string", "null"]},
    },
    "sentinel_ssl": {
        "label": "Sentinels speak TLS",
        "description": "Connect to the sentinels with TLS too (TLS above is the primary's).",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "max_sync_duration_hours": {
        "label": "Maximum sync duration (hours)",
        "description": "A sync running longer is taken as lost (its sync_end never came); "
        "the webhook server's FIVETRAN_EVENTS_MAX_SYNC_DURATION_HOURS (default 24).",
        "schema": {"type": ["number", "null"], "minimum": 0},
    },
}
#: Standard fields: the login is hidden (a URI may still carry a Redis ACL user).
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden_fields": ["login"],
    "relabeling": {"schema": "Database number", "password": "Password (Redis AUTH)"},
    "placeholders": {
        "host": "127.0.0.1",
        "port": "6379",
        "schema": "0",
        "key_prefix": "fte:",
        "max_sync_duration_hours": "24",
    },
}

#: The Fivetran API connection's form: key and secret, an optional other base URL.
FIVETRAN_API_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden_fields": ["schema", "extra"],
    "relabeling": {"login": "API key", "password": "API secret", "host": "Base URL"},
    "placeholders": {"host": "https://api.fivetran.com (empty: Fivetran's own)"},
}


def _version() -> str:
    try:
        return version(PACKAGE_NAME)
    except PackageNotFoundError:  # a source checkout that was never installed
        from fivetran_events import __version__

        return __version__


def _ui_field_behaviour(behaviour: dict[str, Any]) -> dict[str, Any]:
    """Spell a hook's ``get_ui_field_behaviour`` as provider_info does."""
    return {
        "hidden-fields": list(behaviour["hidden_fields"]),
        "relabeling": dict(behaviour["relabeling"]),
        "placeholders": dict(behaviour["placeholders"]),
    }


def _modules(*names: str) -> list[dict[str, Any]]:
    return [
        {"integration-name": INTEGRATION, "python-modules": [f"airflow_plugin.{n}" for n in names]}
    ]


def get_provider_info() -> dict[str, Any]:
    """Return the provider's description in the shape of Airflow's provider_info schema."""
    return {
        "package-name": PACKAGE_NAME,
        "name": "Fivetran events",
        "description": "Fivetran syncs from a webhook-recorded history in Redis: a sensor "
        "that decides without polling Fivetran, its deferrable trigger, sync operators and "
        "asset helpers.",
        "versions": [_version()],
        "integrations": [{"integration-name": INTEGRATION, "tags": ["service"]}],
        "hooks": _modules("hooks"),
        "sensors": _modules("sensors"),
        "operators": _modules("operators.sync", "operators.sql"),
        "triggers": _modules("triggers.decision", "triggers.sync", "triggers.watcher"),
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": "airflow_plugin.hooks.FivetranEventsRedisHook",
                "hook-name": HOOK_NAME,
                "conn-fields": CONN_FIELDS,
                "ui-field-behaviour": _ui_field_behaviour(UI_FIELD_BEHAVIOUR),
            },
            {
                "connection-type": FIVETRAN_CONN_TYPE,
                "hook-class-name": "airflow_plugin.hooks.FivetranApiHook",
                "hook-name": FIVETRAN_API_HOOK_NAME,
                "ui-field-behaviour": _ui_field_behaviour(FIVETRAN_API_UI_FIELD_BEHAVIOUR),
            },
        ],
        "extra-links": ["airflow_plugin.ui.FivetranConnectorLink"],
        "plugins": [
            {
                "name": "fivetran_events",
                "plugin-class": "airflow_plugin.plugin.FivetranEventsPlugin",
            }
        ],
    }
