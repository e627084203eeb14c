"""Fivetran's REST API client (``fivetran_events.fivetran_api``) as an Airflow hook.

``FivetranApiHook`` reads the connection users already have for Fivetran's providers,
``fivetran_default`` (login = API key, password = API secret), whatever its connection
type; the provider registers the type ``fivetran`` with a form for it::

    AIRFLOW_CONN_FIVETRAN_DEFAULT='fivetran://KEY:SECRET@'

A host on the connection points the client at another base URL (a proxy, a stand-in):
with its scheme (``http://127.0.0.1:8080``) it is taken as it is, without one
``https://`` is put in front; the connection's port, if set, is added.
"""

from __future__ import annotations

import copy
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from fivetran_events import ConfigurationError
from fivetran_events.fivetran_api import FivetranApiError, FivetranClient
from fivetran_events.settings import DEFAULT_FIVETRAN_API_URL

from ..compat import BaseHook, Connection, aget_connection
from ..provider import (
    FIVETRAN_API_HOOK_NAME,
    FIVETRAN_API_UI_FIELD_BEHAVIOUR,
    FIVETRAN_CONN_TYPE,
)

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


class FivetranApiHook(BaseHook):
    """Call Fivetran's REST API with the key and secret of an Airflow connection.

    ``client_kwargs`` go to ``FivetranClient`` (``timeout``, ``max_attempts``, ...).
    """

    conn_name_attr = "fivetran_conn_id"
    default_conn_name = DEFAULT_FIVETRAN_CONN_ID
    conn_type = FIVETRAN_CONN_TYPE
    hook_name = FIVETRAN_API_HOOK_NAME

    def __init__(
        self, fivetran_conn_id: str = DEFAULT_FIVETRAN_CONN_ID, **client_kwargs: Any
    ) -> None:
        super().__init__()
        self.fivetran_conn_id = fivetran_conn_id
        self.client_kwargs = client_kwargs

    def get_conn(self) -> FivetranClient:
        """Return the (cached) client."""
        return self._client

    @cached_property
    def _client(self) -> FivetranClient:
        return client_from_connection(
            self.get_connection(self.fivetran_conn_id), **self.client_kwargs
        )

    async def aget_conn(self) -> FivetranClient:
        """Build a client, resolving the connection without blocking the loop (triggers)."""
        conn = await aget_connection(self.fivetran_conn_id)
        return client_from_connection(conn, **self.client_kwargs)

    def test_connection(self) -> tuple[bool, str]:
        """List the account's groups (the UI's Test button): one API call."""
        try:
            groups = self.get_conn().groups()
        except (ConfigurationError, FivetranApiError) as exc:
            return False, f"Fivetran's API refused or failed: {exc}"
        return True, f"Fivetran's API answered: {len(groups)} destination group(s)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Return ``FIVETRAN_API_UI_FIELD_BEHAVIOUR`` (the UIs of Airflow before 3.2)."""
        return copy.deepcopy(FIVETRAN_API_UI_FIELD_BEHAVIOUR)
