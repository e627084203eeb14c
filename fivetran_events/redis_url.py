"""Redis URLs, Redis Sentinel included: one convention, one place that builds clients.

Sentinel is written as redis-py, Dramatiq and Flower users write it (docs/production.md)::

    redis+sentinel://[[user]:password@]host1[:26379][,host2[:26379]...]/service[/db][?options]

Clients ask the sentinels for the primary on every new connection, so they follow a failover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelPool
from redis.sentinel import Sentinel

from .text import as_text, parse_flag

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
PLAIN_SCHEMES = ("redis", "rediss", "unix")
DEFAULT_SENTINEL_PORT = 26379
#: Query options a sentinel URL may carry; anything else is refused, not ignored.
SENTINEL_OPTIONS = frozenset(
    {"sentinel_username", "sentinel_password", "sentinel_ssl", "ssl_ca_certs"}
)
EXAMPLE = "redis+sentinel://:password@host1:26379,host2:26379,host3:26379/mymaster/0"


@dataclass(frozen=True)
class SentinelUrl:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    ssl: bool = False
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    sentinel_ssl: bool = False
    ssl_ca_certs: str | None = None

    def _kwargs(self, extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Split into the data nodes' and the sentinels' connection options."""
        ca = extra.pop("ssl_ca_certs", None) or self.ssl_ca_certs
        node = {"db": self.db, **extra, **_auth(self.username, self.password, self.ssl, ca)}
        # The sentinels get the same timeouts (a dead sentinel must not hang a connect).
        sentinel = {k: v for k, v in extra.items() if k.startswith("socket_")}
        sentinel.update(
            _auth(self.sentinel_username, self.sentinel_password, self.sentinel_ssl, ca)
        )
        return node, sentinel

    def client(self, **kwargs: Any) -> redis.Redis:
        node, sentinel = self._kwargs(dict(kwargs))
        manager = Sentinel(list(self.sentinels), sentinel_kwargs=sentinel)
        return cast(redis.Redis, manager.master_for(self.service, **node))

    def async_client(self, max_connections: int | None = None, **kwargs: Any) -> aioredis.Redis:
        """The asyncio twin of ``client``; ``max_connections``: a pool that waits when full."""
        node, sentinel = self._kwargs(dict(kwargs))
        manager = AsyncSentinel(list(self.sentinels), sentinel_kwargs=sentinel)
        if max_connections is not None:
            node.update(
                connection_pool_class=_BlockingSentinelPool,
                max_connections=max_connections,
                timeout=None,
            )
        return cast(aioredis.Redis, manager.master_for(self.service, **node))

    def where(self) -> str:
        """Describe it without credentials."""
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
        return f"sentinels {hosts}, service {self.service}, db {self.db}"


class _BlockingSentinelPool(AsyncSentinelPool, aioredis.BlockingConnectionPool):
    """A Sentinel pool that waits for a free connection when full (the triggerer's
    shared pool queues reads); redis-py has no such class."""


def _auth(username: str | None, password: str | None, tls: bool, ca: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"username": username, "password": password}
    if tls:
        out.update(ssl=True, ssl_ca_certs=ca)
    return {k: v for k, v in out.items() if v}


def is_sentinel(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SENTINEL_SCHEMES


def parse_sentinel_url(url: str) -> SentinelUrl:
    """Parse a ``redis+sentinel://`` URL; raise ValueError saying what is wrong."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SENTINEL_SCHEMES:
        raise ValueError(
            f"a sentinel URL starts with redis+sentinel:// or rediss+sentinel://, e.g. {EXAMPLE}"
        )
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    sentinels = tuple(_host_port(h) for h in hostlist.split(","))
    path = [unquote(p) for p in parts.path.split("/")[1:]]
    if not path or not path[0] or len(path) > 2:
        raise ValueError(f"the path must be /service_name or /service_name/db, e.g. {EXAMPLE}")
    db = path[1] if len(path) == 2 else "0"
    if not db.isdigit():
        raise ValueError(f"the database must be a number, not {db!r}")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - SENTINEL_OPTIONS)
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(unknown)}; a sentinel URL takes "
            f"{', '.join(sorted(SENTINEL_OPTIONS))}"
        )
    return SentinelUrl(
        sentinels=sentinels,
        service=path[0],
        db=int(db),
        username=unquote(username) or None,
        password=unquote(password) or None,
        ssl=scheme == "rediss+sentinel",
        sentinel_username=query.get("sentinel_username") or None,
        sentinel_password=query.get("sentinel_password") or None,
        sentinel_ssl=parse_flag(query.get("sentinel_ssl") or "false", "sentinel_ssl"),
        ssl_ca_certs=query.get("ssl_ca_certs") or None,
    )


def check_url(url: str) -> str:
    """Return ``url`` if this project can connect with it; raise ValueError otherwise."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in SENTINEL_SCHEMES:
        parse_sentinel_url(url)
    elif scheme not in PLAIN_SCHEMES:
        raise ValueError(f"must be a redis://, rediss://, unix:// or sentinel URL ({EXAMPLE})")
    return url


def client_from_url(url: str, **kwargs: Any) -> redis.Redis:
    if is_sentinel(url):
        return parse_sentinel_url(url).client(**kwargs)
    return redis.Redis.from_url(url, **kwargs)


def async_client_from_url(
    url: str, max_connections: int | None = None, **kwargs: Any
) -> aioredis.Redis:
    """Return an asyncio client; ``max_connections``: a pool that waits when full."""
    if is_sentinel(url):
        return parse_sentinel_url(url).async_client(max_connections, **kwargs)
    if max_connections is None:
        return aioredis.Redis.from_url(url, **kwargs)
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=None, **kwargs
    )
    return aioredis.Redis(connection_pool=pool)


def _host_port(text: str) -> tuple[str, int]:
    host, port = text, ""
    if text.startswith("[") and "]" in text:  # [IPv6]:port
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    elif ":" in text:
        host, _, port = text.rpartition(":")
    if not host or any(ch in host for ch in " /?#@[]"):
        raise ValueError(f"a sentinel address must be host[:port], not {text!r}")
    if not port:
        return host, DEFAULT_SENTINEL_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"sentinel port must be a number from 1 to 65535, not {port!r}")
    return host, int(port)


def eviction_risk(client: redis.Redis) -> str | None:
    """Say why Redis may drop our keys, or None under ``noeviction``: ``volatile-*`` evicts
    delivery records, leases and RQ jobs, ``allkeys-*`` the history too. Reads ``INFO``, else
    ``CONFIG GET`` (an ACL may refuse one); refusing both raises ``redis.ResponseError``."""
    try:
        policy = as_text(client.info("memory").get("maxmemory_policy", "noeviction"))
    except redis.ResponseError:
        answer = client.config_get("maxmemory-policy")
        policy = as_text(answer.get("maxmemory-policy", "noeviction"))
    if policy == "noeviction":
        return None
    return (
        f"Redis's maxmemory-policy is {policy}, so it may evict keys when memory runs short "
        "(deliveries, leases, jobs, the history): set maxmemory-policy noeviction"
    )
