"""The ``fivetran_events`` connection type's form, as data free of Airflow imports.

Airflow calls the provider's ``get_provider_info`` in every process that discovers
providers, sometimes while ``airflow`` itself is still importing; so the form lives here,
importable without Airflow, and both ``provider.get_provider_info`` (Airflow 3.2+ reads
forms declaratively) and the hook's ``get_connection_form_widgets`` /
``get_ui_field_behaviour`` (the UIs before 3.2) are built from it.
"""

from __future__ import annotations

from typing import Any

#: The provider's connection type (``fivetran-events://`` in a URI).
CONN_TYPE = "fivetran_events"

#: The provider's form for a ``fivetran_events`` connection, in the declarative shape of
#: a provider's ``conn-fields`` (stored in the connection's extras). Airflow 3.2+ reads it
#: from ``get_provider_info``; older UIs get the same from ``get_connection_form_widgets``.
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
