"""The provider's hooks: the history's Redis and Fivetran's REST API, as connections.

``read_retrying`` and ``aread_retrying`` are the one outage policy of the sensor, its
trigger and the operators; docs/airflow-setup.md lists the connections' fields.
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import redis
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    stop_never,
)

from fivetran_events import ConfigurationError, HistoryReader
from fivetran_events.decision import Completion
from fivetran_events.exceptions import FivetranApiError
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.freshness import Freshness
from fivetran_events.history import ConnectorRecord
from fivetran_events.http import backoff
from fivetran_events.redis_url import (
    check_url,
    client_from_url,
    is_sentinel,
    parse_sentinel_url,
)
from fivetran_events.settings import DEFAULT_FIVETRAN_API_URL, history_defaults
from fivetran_events.text import parse_flag

from .compat import AIRFLOW_V_3, BaseHook, Connection, aget_connection
from .exceptions import ConnectorNameError, FivetranHistoryUnavailable
from .provider import (
    CONN_FIELDS,
    CONN_TYPE,
    FIVETRAN_API_HOOK_NAME,
    FIVETRAN_API_UI_FIELD_BEHAVIOUR,
    FIVETRAN_CONN_TYPE,
    HOOK_NAME,
    UI_FIELD_BEHAVIOUR,
)

DEFAULT_CONN_ID = "fivetran_events_redis"
#: The connection id Fivetran's providers use by default.
DEFAULT_FIVETRAN_CONN_ID = "fivetran_default"
#: Seconds a check keeps retrying an unreachable Redis before it reports the outage.
DEFAULT_REDIS_RETRY_TIMEOUT = 60.0
#: First pause between two attempts; it doubles after each failed one, up to the cap.
RETRY_FIRST_DELAY = 0.5
RETRY_MAX_DELAY = 10.0
#: "Redis cannot be reached now", retried (a Redis still loading raises ``BusyLoadingError``).
UNREACHABLE: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError, OSError)
#: A task process's client connects and reads once, so it sends nothing on connect: RESP2 (no
#: HELLO, nor redis-py 8's CLIENT MAINT_NOTIFICATIONS, refused before Redis 8), no CLIENT
#: SETINFO (``driver_info`` from redis-py 7.1, ``lib_name`` before), no health check PING. A
#: connection that died idle fails its read, which redis-py's retry and ``read_retrying`` redo.
TASK_CLIENT_KWARGS: dict[str, Any] = {
    "protocol": 2,
    "health_check_interval": 0,
    **(
        {"driver_info": None}
        if "driver_info" in inspect.signature(redis.Redis.__init__).parameters
        else {"lib_name": None, "lib_version": None}
    ),
}
T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HistoryConfig:
    url: str
    key_prefix: str
    max_sync_duration_ms: int
    ssl_ca_certs: str | None = None

    def to_redis_kwargs(self) -> dict[str, Any]:
        # socket_timeout: a stalled Redis must fail a read (and be retried), not hang it.
        kwargs: dict[str, Any] = {
            "decode_responses": False,
            "socket_connect_timeout": 10,
            "socket_timeout": 10,
            "health_check_interval": 30,
        }
        if self.ssl_ca_certs:
            kwargs["ssl_ca_certs"] = self.ssl_ca_certs
        return kwargs

    def where(self) -> str:
        """Return host:port/db (the URL without its credentials)."""
        if is_sentinel(self.url):
            return parse_sentinel_url(self.url).where()
        parts = urlsplit(self.url)
        return f"{parts.hostname}:{parts.port or 6379}{parts.path or '/0'}"


def config_from_connection(conn: Connection) -> HistoryConfig:
    extra = _extras(conn)
    ssl = extra.get("ssl")
    tls = (conn.conn_type or "").lower() == "rediss" or (
        ssl is not None and parse_flag(str(ssl), f"connection {conn.conn_id}: extra ssl")
    )
    db = extra.get("db", conn.schema if conn.schema not in (None, "") else 0)
    try:
        db = int(db)
    except (TypeError, ValueError):
        raise ValueError(
            f"connection {conn.conn_id}: db/schema must be a database number, not {db!r}"
        ) from None
    auth = ""
    if conn.login or conn.password:
        auth = f"{quote(conn.login or '', safe='')}:{quote(conn.password or '', safe='')}@"
    scheme = "rediss" if tls else "redis"
    if extra.get("url"):
        url = str(extra["url"])
    elif extra.get("sentinels"):
        service = extra.get("sentinel_service", "")
        url = f"{scheme}+sentinel://{auth}{extra['sentinels']}/{service}/{db}"
        query = [(k, str(extra[k])) for k in ("sentinel_password", "sentinel_ssl") if k in extra]
        url += f"?{urlencode(query)}" if query else ""
    else:
        url = f"{scheme}://{auth}{conn.host or '127.0.0.1'}:{conn.port or 6379}/{db}"
    try:
        check_url(url)
    except ValueError as exc:
        raise ValueError(f"connection {conn.conn_id}: the Redis URL is not usable: {exc}") from None
    tls = tls or url.lower().startswith("rediss")
    # The FIVETRAN_EVENTS_* defaults only when an extra is missing (read once per process).
    raw_prefix, raw_hours = extra.get("key_prefix"), extra.get("max_sync_duration_hours")
    if not raw_prefix or raw_hours is None:
        defaults = history_defaults()
        raw_prefix = raw_prefix or defaults.key_prefix
        raw_hours = defaults.max_sync_duration_hours if raw_hours is None else raw_hours
    try:
        hours = float(raw_hours)
    except (TypeError, ValueError):
        hours = -1.0
    if not hours > 0:
        raise ValueError(
            f"connection {conn.conn_id}: max_sync_duration_hours must be a number of hours "
            f"above 0, not {raw_hours!r}"
        )
    return HistoryConfig(
        url=url,
        key_prefix=str(raw_prefix),
        max_sync_duration_ms=int(hours * 3600 * 1000),
        ssl_ca_certs=str(extra["ssl_ca_certs"]) if tls and extra.get("ssl_ca_certs") else None,
    )


def _extras(conn: Connection) -> dict[str, Any]:
    """Return the extras, ``extra__fivetran_events__x`` read as ``x`` (a plain ``x`` wins)."""
    raw = getattr(conn, "extra", None)
    extra: Any
    if AIRFLOW_V_3 and isinstance(raw, str):
        # Airflow 3 masked these already; each ``extra_dejson`` masks again, a blocking trip.
        try:
            extra = json.loads(raw) if raw else {}
        except ValueError:
            extra = conn.extra_dejson  # logs Airflow's error and gives {}, as before
    else:
        extra = getattr(conn, "extra_dejson", None)
        if extra is None:
            extra = json.loads(raw) if raw else {}
    if not isinstance(extra, dict):
        raise ValueError(
            f"connection {conn.conn_id}: extra must be a JSON object, not {type(extra).__name__}"
        )
    form_prefix = f"extra__{CONN_TYPE}__"
    out = {k[len(form_prefix) :]: v for k, v in extra.items() if k.startswith(form_prefix)}
    out.update({k: v for k, v in extra.items() if not k.startswith(form_prefix)})
    # An empty form field is "not set", not an empty value.
    return {k: v for k, v in out.items() if v not in (None, "")}


class FivetranEventsRedisHook(BaseHook):
    """Read the Fivetran sync history that the webhook server records in Redis."""

    conn_name_attr = "redis_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = HOOK_NAME

    def __init__(self, redis_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.redis_conn_id = redis_conn_id

    @cached_property
    def config(self) -> HistoryConfig:
        return config_from_connection(self.get_connection(self.redis_conn_id))

    def get_conn(self) -> redis.Redis:
        return self._client

    @cached_property
    def _client(self) -> redis.Redis:
        return client_from_url(
            self.config.url, **{**self.config.to_redis_kwargs(), **TASK_CLIENT_KWARGS}
        )

    def reader(self) -> HistoryReader:
        cfg = self.config
        fresh = Freshness.from_settings(history_defaults())  # the grace, the objectives
        return HistoryReader(self.get_conn(), cfg.key_prefix, cfg.max_sync_duration_ms, fresh)

    async def aconfig(self) -> HistoryConfig:
        return config_from_connection(await aget_connection(self.redis_conn_id))

    def read_retrying(self, read: Callable[[HistoryReader], T], what: str, timeout: float) -> T:
        """Return ``read(reader)``, retried while Redis is unreachable for ``timeout`` s."""
        try:
            return Retrying(**_retry_policy(what, timeout))(lambda: read(self.reader()))
        except UNREACHABLE as exc:
            raise _unavailable(what, self.config, self.redis_conn_id, timeout, exc) from exc

    def last_success(self, connector_id: str, as_of_ms: int) -> Completion | None:
        return self.reader().last_success(connector_id, as_of_ms)

    def test_connection(self) -> tuple[bool, str]:
        try:
            self.get_conn().ping()
        except redis.RedisError as exc:
            return False, f"cannot reach Redis: {exc}"
        return True, "Redis answered PING"

    def connector_id_for(
        self, name: str, destination_name: str | None = None, *, timeout: float = 0.0
    ) -> str:
        connectors = self.read_retrying(
            lambda r: r.connector_records(), "the recorded connectors", timeout
        )
        return resolve_connector_name(connectors, name, destination_name)

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Return ``CONN_FIELDS`` as WTForms fields (the UIs of Airflow before 3.2)."""
        from flask_babel import lazy_gettext
        from wtforms import BooleanField, StringField

        out: dict[str, Any] = {}
        for name, field in CONN_FIELDS.items():
            kind = BooleanField if "boolean" in field["schema"]["type"] else StringField
            out[name] = kind(lazy_gettext(field["label"]), description=field["description"])
        return out

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Return ``UI_FIELD_BEHAVIOUR`` (the UIs of Airflow before 3.2)."""
        return copy.deepcopy(UI_FIELD_BEHAVIOUR)


def _retry_policy(what: str, timeout: float | None) -> dict[str, Any]:
    """Retry while Redis is unreachable for ``timeout`` s (None: until cancelled)."""

    def warn(state: RetryCallState) -> None:
        delay = state.next_action.sleep if state.next_action else 0.0
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "cannot read %s (%s); attempt %d failed, retrying in %.1fs",
            what,
            exc,
            state.attempt_number,
            delay,
        )

    return {
        "retry": retry_if_exception_type(UNREACHABLE),
        "wait": lambda state: backoff(state.attempt_number, RETRY_FIRST_DELAY, RETRY_MAX_DELAY),
        "stop": stop_never if timeout is None else stop_after_delay(timeout),
        "before_sleep": warn,
        "reraise": True,
    }


def _unavailable(
    what: str, cfg: HistoryConfig, conn_id: str, timeout: float | None, exc: BaseException
) -> FivetranHistoryUnavailable:
    return FivetranHistoryUnavailable(
        f"cannot read {what} from Redis at {cfg.where()} (connection {conn_id}): still "
        f"unreachable after retrying for {timeout or 0:g}s: {exc}"
    )


async def aread_retrying(
    read: Callable[[], Awaitable[T]],
    *,
    what: str,
    cfg: HistoryConfig,
    conn_id: str,
    timeout: float | None,
) -> T:
    """Await ``read()``, retried as ``FivetranEventsRedisHook.read_retrying`` (triggers)."""
    try:
        async for attempt in AsyncRetrying(**_retry_policy(what, timeout)):
            with attempt:
                return await read()
    except UNREACHABLE as exc:
        raise _unavailable(what, cfg, conn_id, timeout, exc) from exc
    raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover


def resolve_connector_name(
    connectors: Iterable[ConnectorRecord], name: str, destination_name: str | None = None
) -> str:
    """Return the id of the one recorded connector called ``name``; ``destination_name``
    is the group id: Fivetran's webhooks carry no destination's display name."""
    known = [(c.connector_id, c.name, c.group) for c in connectors]
    named = sorted(k for k in known if k[1] == name)
    found = [k for k in named if destination_name is None or k[2] == destination_name]
    if len(found) == 1:
        return found[0][0]
    where = f" in destination (group) {destination_name!r}" if destination_name else ""
    if found:
        raise ConnectorNameError(
            f"connector name {name!r} is ambiguous: {_listing(found)}; "
            f"give destination_name (the group) or connector_id"
        )
    if named:
        raise ConnectorNameError(
            f"no connector named {name!r}{where}; connectors of that name: {_listing(named)}"
        )
    names = sorted({k[1] for k in known if k[1]})
    raise ConnectorNameError(
        f"no connector named {name!r}{where} in the recorded history "
        f"(known names: {', '.join(names) or 'none yet'}); a connector is known once one "
        f"of its webhooks has been recorded"
    )


def _listing(candidates: list[tuple[str, Any, Any]]) -> str:
    return ", ".join(f"{cid} (group {group})" for cid, _, group in candidates)


def base_url_of(conn: Connection) -> str:
    """Return the connection's host as a base URL, or Fivetran's own when it has none."""
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
    """Call Fivetran's REST API; ``client_kwargs`` go to ``FivetranClient`` (``timeout``, ...)."""

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
        return self._client

    @cached_property
    def _client(self) -> FivetranClient:
        return client_from_connection(
            self.get_connection(self.fivetran_conn_id), **self.client_kwargs
        )

    async def aget_conn(self) -> FivetranClient:
        conn = await aget_connection(self.fivetran_conn_id)
        return client_from_connection(conn, **self.client_kwargs)

    def test_connection(self) -> tuple[bool, str]:
        try:
            groups = self.get_conn().groups()
        except (ConfigurationError, FivetranApiError) as exc:
            return False, f"Fivetran's API refused or failed: {exc}"
        return True, f"Fivetran's API answered: {len(groups)} destination group(s)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Return ``FIVETRAN_API_UI_FIELD_BEHAVIOUR`` (the UIs of Airflow before 3.2)."""
        return copy.deepcopy(FIVETRAN_API_UI_FIELD_BEHAVIOUR)
