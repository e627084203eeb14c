"""``history.command.call``: one command as ``Redis.execute_command`` sends it, leaner.

It uses redis-py's connection calls directly; these tests fail if redis-py changes what
it relies on (the pool's get_connection/release, send_packed_command, read_response, the
connection's retry).
"""

from __future__ import annotations

import pytest
import redis
from redis.exceptions import NoScriptError

from fivetran_events import Settings
from fivetran_events.history.command import call

pytestmark = pytest.mark.redis


@pytest.fixture
def own_client(settings: Settings) -> redis.Redis:
    """A client made as the webhook makes its own (timeouts, the retry policy)."""
    return settings.redis_client()


def test_replies_as_execute_command(own_client: redis.Redis) -> None:
    """The same replies (before redis-py's response callbacks), binary arguments included."""
    assert call(own_client, "SET", "cmd:k", b"\x00\xffv") == b"OK"
    assert call(own_client, "GET", "cmd:k") == b"\x00\xffv" == own_client.get("cmd:k")
    reply = call(own_client, "EVAL", "return {KEYS[1], ARGV[1], 7}", 1, "cmd:a", 42)
    assert reply == own_client.execute_command(
        "EVAL", "return {KEYS[1], ARGV[1], 7}", 1, "cmd:a", 42
    )
    assert reply == [b"cmd:a", b"42", 7]


def test_errors_raise_redis_py_exceptions(own_client: redis.Redis) -> None:
    """An error reply raises its class, and the connection stays usable."""
    own_client.hset("cmd:h", "f", "v")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        call(own_client, "INCR", "cmd:h")
    with pytest.raises(NoScriptError):
        call(own_client, "EVALSHA", "0" * 40, 0)
    assert call(own_client, "PING") == b"PONG"


def test_the_connection_goes_back_to_the_pool(own_client: redis.Redis) -> None:
    """One connection serves every call, whether it succeeded or raised."""
    pool = own_client.connection_pool
    for _ in range(5):
        call(own_client, "PING")
        with pytest.raises(redis.ResponseError):
            call(own_client, "NOSUCHCOMMAND")
    assert len(pool._in_use_connections) == 0
    assert len(pool._available_connections) == 1


def test_a_killed_connection_is_retried(own_client: redis.Redis, client: redis.Redis) -> None:
    """The server dropping the connection between two calls costs a reconnect, not an error."""
    call(own_client, "PING")
    assert client.client_kill_filter(skipme=True) >= 1  # every client but this one
    assert call(own_client, "SET", "cmd:after", "1") == b"OK"
    assert client.get("cmd:after") == b"1"
