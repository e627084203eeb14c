"""The Redis URL convention, Sentinel included: what is accepted and what is refused."""

from __future__ import annotations

import pytest
import redis
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelPool
from redis.sentinel import SentinelConnectionPool, SentinelManagedSSLConnection

from fivetran_events import ConfigurationError, load_settings
from fivetran_events.redis_url import (
    async_client_from_url,
    check_url,
    client_from_url,
    parse_sentinel_url,
)


class TestParse:
    def test_full_url(self) -> None:
        """Hosts with and without ports, credentials, service, db and every option."""
        u = parse_sentinel_url(
            "rediss+sentinel://app:p%40ss@s1:26380,s2,[::1]:26381/my-master/3"
            "?sentinel_password=spw&sentinel_username=su&sentinel_ssl=true&ssl_ca_certs=/ca.pem"
        )
        assert u.sentinels == (("s1", 26380), ("s2", 26379), ("::1", 26381))
        assert (u.service, u.db, u.username, u.password) == ("my-master", 3, "app", "p@ss")
        assert u.ssl and u.sentinel_ssl
        assert (u.sentinel_username, u.sentinel_password, u.ssl_ca_certs) == (
            "su",
            "spw",
            "/ca.pem",
        )

    def test_defaults(self) -> None:
        u = parse_sentinel_url("redis+sentinel://h1:1,h2:2/svc")
        assert u.db == 0 and u.password is None and not u.ssl and not u.sentinel_ssl
        assert "secret" not in parse_sentinel_url("redis+sentinel://:secret@h/svc").where()

    @pytest.mark.parametrize(
        ("url", "says"),
        [
            ("redis+sentinel://h1:26379", "/service_name"),
            ("redis+sentinel://h1:26379/", "/service_name"),
            ("redis+sentinel://h1/svc/0/extra", "/service_name"),
            ("redis+sentinel://h1/svc/zero", "database must be a number"),
            ("redis+sentinel://h1:port/svc", "port must be a number"),
            ("redis+sentinel://h1:70000/svc", "port must be a number"),
            ("redis+sentinel://h1,,h2/svc", "host[:port]"),
            ("redis+sentinel:///svc", "host[:port]"),
            ("redis+sentinel://h1/svc?master_name=x", "unknown option(s) master_name"),
            ("redis+sentinel://h1/svc?sentinel_ssl=maybe", "sentinel_ssl must be true or false"),
            ("sentinel://h1/svc", "must be a redis://"),
            ("http://nope", "must be a redis://"),
        ],
    )
    def test_bad_urls_say_what_is_wrong(self, url: str, says: str) -> None:
        with pytest.raises(ValueError) as info:
            check_url(url)
        assert says in str(info.value)

    def test_plain_urls_pass_unchanged(self) -> None:
        for url in ("redis://h:6379/0", "rediss://:pw@h/1", "unix:///run/redis.sock"):
            assert check_url(url) == url


class TestSettings:
    def test_a_bad_sentinel_url_names_the_variable(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("FIVETRAN_EVENTS_REDIS_URL", "redis+sentinel://h1:26379")
        with pytest.raises(ConfigurationError, match=r"FIVETRAN_EVENTS_REDIS_URL: .*service_name"):
            load_settings()

    def test_wait_timeout_zero_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """WAIT with timeout 0 blocks for ever: never a valid setting."""
        monkeypatch.setenv("FIVETRAN_EVENTS_REDIS_WAIT_TIMEOUT_MS", "0")
        with pytest.raises(ConfigurationError, match="FIVETRAN_EVENTS_REDIS_WAIT_TIMEOUT_MS"):
            load_settings()

    def test_the_factory_builds_a_sentinel_client_with_the_timeouts(self) -> None:
        """No connection is made until a command: the pool asks the sentinels then."""
        s = load_settings(
            redis_url="rediss+sentinel://:pw@h1,h2:26390/svc/2?sentinel_password=spw",
            redis_timeout_seconds=1.5,
        )
        client = s.redis_client()
        pool = client.connection_pool
        assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "svc"
        assert pool.connection_class is SentinelManagedSSLConnection
        kw = pool.connection_kwargs
        assert (kw["db"], kw["password"], kw["socket_timeout"]) == (2, "pw", 1.5)
        sentinels = pool.sentinel_manager.sentinels
        assert [c.connection_pool.connection_kwargs["port"] for c in sentinels] == [26379, 26390]
        assert all(c.connection_pool.connection_kwargs["password"] == "spw" for c in sentinels)
        assert all(c.connection_pool.connection_kwargs["socket_timeout"] == 1.5 for c in sentinels)


def test_async_client_with_a_bounded_pool_waits_when_full() -> None:
    """The triggerer's shared pool: Sentinel-aware and blocking, not raising, when full."""
    client = async_client_from_url("redis+sentinel://h1/svc", max_connections=3)
    pool = client.connection_pool
    assert isinstance(pool, AsyncSentinelPool) and isinstance(
        pool, redis.asyncio.BlockingConnectionPool
    )
    assert pool.max_connections == 3 and pool.timeout is None
    assert isinstance(client_from_url("redis://h/0"), redis.Redis)
