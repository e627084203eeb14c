"""``history.command.call``: one command as ``Redis.execute_command`` sends it, leaner.

It uses redis-py's connection calls directly; these tests fail if redis-py changes what
it relies on (the pool's get_connection/release, send_packed_command, read_response, the
connection's retry), and check the connection each pool lends it: one for every call,
never left with a reply unread, not shared between threads or with a forked child.
"""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time
import weakref
from typing import Any

import pytest
import redis
from redis.exceptions import NoScriptError

from fivetran_events import Settings
from fivetran_events.history.command import call
from testkit.processes import poll_until


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


def test_one_lent_connection_serves_every_call(own_client: redis.Redis) -> None:
    """The pool lends one connection for good, whether a call succeeded or raised."""
    pool = own_client.connection_pool
    ids = set()
    for _ in range(5):
        ids.add(call(own_client, "CLIENT", "ID"))
        with pytest.raises(redis.ResponseError):
            call(own_client, "NOSUCHCOMMAND")
    assert len(ids) == 1
    assert len(pool._in_use_connections) == 1  # lent, so pool.disconnect() closes it
    assert len(pool._available_connections) == 0
    pool.disconnect()
    assert call(own_client, "PING") == b"PONG"  # reconnected on the next call


def test_an_interrupted_read_never_answers_the_next_call(settings: Settings) -> None:
    """A call that times out with its reply still to come disconnects the lent connection:
    the next call reads its own reply, not the late one."""
    quick = redis.Redis.from_url(settings.redis_url, socket_timeout=0.2, retry=None)
    with pytest.raises(redis.TimeoutError):
        call(quick, "BLPOP", "cmd:empty", "0.5")  # answers nil after 0.5 s
    time.sleep(0.5)  # the nil has come by now, on the old connection
    assert call(quick, "ECHO", "mine") == b"mine"


def test_a_thread_finding_it_busy_takes_a_pooled_connection(
    own_client: redis.Redis, client: redis.Redis
) -> None:
    """While one thread waits on the lent connection, another's call does not wait for it."""
    started = threading.Event()

    def hold() -> None:
        started.set()
        call(own_client, "BLPOP", "cmd:held", "1")

    waiter = threading.Thread(target=hold)
    call(own_client, "PING")  # lend it to this thread first
    waiter.start()
    started.wait()
    poll_until(  # the waiter's BLPOP is on the server, so the lent connection is busy
        lambda: any(c.get("cmd") == "blpop" for c in client.client_list()),
        "the waiter's BLPOP to reach Redis",
        timeout=5,
        interval=0.01,
    )
    t = time.monotonic()
    replies = []
    other = threading.Thread(target=lambda: replies.append(call(own_client, "ECHO", "x")))
    other.start()
    other.join(5)
    assert replies == [b"x"]
    assert time.monotonic() - t < 0.8  # not after the BLPOP's second
    waiter.join(5)
    assert len(own_client.connection_pool._available_connections) == 1  # given back


def _child_client_id(client: redis.Redis, out: multiprocessing.Queue[Any]) -> None:
    out.put(call(client, "CLIENT", "ID"))


def test_a_forked_child_uses_a_connection_of_its_own(own_client: redis.Redis) -> None:
    """A child never writes on its parent's socket (gunicorn forks its workers)."""
    parent = call(own_client, "CLIENT", "ID")
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[Any] = ctx.Queue()
    child = ctx.Process(target=_child_client_id, args=(own_client, out))
    child.start()
    child.join(10)
    assert child.exitcode == 0
    assert out.get(timeout=5) != parent
    assert call(own_client, "CLIENT", "ID") == parent  # the parent's is untouched


def test_a_killed_connection_is_retried(own_client: redis.Redis, client: redis.Redis) -> None:
    """The server dropping the connection between two calls costs a reconnect, not an error."""
    call(own_client, "PING")
    assert client.client_kill_filter(skipme=True) >= 1  # every client but this one
    assert call(own_client, "SET", "cmd:after", "1") == b"OK"
    assert client.get("cmd:after") == b"1"


def test_a_dropped_client_takes_its_lent_connection_with_it(settings: Settings) -> None:
    """Nothing but the pool keeps the lent connection: a client made per task or per test
    and dropped leaves no pool, connection or socket behind."""
    pools = []
    for _ in range(3):
        own = settings.redis_client()
        call(own, "PING")
        pools.append(weakref.ref(own.connection_pool))
        del own
    gc.collect()
    assert [ref() for ref in pools] == [None, None, None]
