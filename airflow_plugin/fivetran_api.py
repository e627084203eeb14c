"""Fivetran's REST API client (``fivetran_events.fivetran_api``) from an Airflow connection.

It reads the connection users already have for Fivetran's providers, ``fivetran_default``
(login = API key, password = API secret), whatever its connection type::

    AIRFLOW_CONN_FIVETRAN_DEFAULT='fivetran://KEY:SECRET@'

A host on the connection points the client at another base URL (a proxy, a stand-in):
with its scheme (``http://127.0.0.1:8080``) it is taken as it is, without one
``https://`` is put in front; the connection's port, if set, is added.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fivetran_events import ConfigurationError
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.settings import DEFAULT_FIVETRAN_API_URL

from .compat import BaseHook, Connection

#: The connection id Fivetran's providers use by default.
DEFAULT_FIVETRAN_CONN_ID = "fivetran_default"


def base_url_of(conn: Connection) -> str:
    """The API's base URL a connection names: its host (and port), or Fivetran's own."""
    host = (conn.host or "").strip()
    if not host:
        return DEFAULT_FIVETRAN_API_URL
    url = host if "://" in host else f"https://{host}"
    if conn.port and urlsplit(url).port is None:
        parts = urlsplit(url)
        url = parts._replace(netloc=f"{parts.netloc}:{conn.port}").geturl()
    return url


def client_from_connection(conn: Connection, **kwargs: Any) -> FivetranClient:
    """Build the client from a connection's login (key), password (secret) and host."""
    if not conn.login or not conn.password:
        raise ConfigurationError(
            f"Airflow connection {conn.conn_id!r} needs the Fivetran API key as its login "
            "and the API secret as its password"
        )
    try:
        return FivetranClient(conn.login, conn.password, base_url_of(conn), **kwargs)
    except ConfigurationError as exc:
        raise ConfigurationError(f"Airflow connection {conn.conn_id!r}: {exc}") from None


def fivetran_client(conn_id: str = DEFAULT_FIVETRAN_CONN_ID, **kwargs: Any) -> FivetranClient:
    """Build the client from the Airflow connection ``conn_id`` (``fivetran_default``).

    ``kwargs`` go to ``FivetranClient`` (``timeout``, ``max_attempts``, ...).
    """
    return client_from_connection(BaseHook.get_connection(conn_id), **kwargs)
