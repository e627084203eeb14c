"""The one-round-trip checked transaction, and the redis-py internals it stands on.

``fivetran_events/history/transaction.py`` drives redis-py's connection directly. If a
redis-py release renames or reshapes any of what it uses, these tests say which, by
name, instead of the webhook failing on its first delivery. Real redis-server.
"""

from __future__ import annotations

import inspect

import pytest
import redis
from redis.client import EMPTY_RESPONSE, Pipeline

from fivetran_events._history_lua import CHECK
from fivetran_events.history.transaction import TransactionOutcome, execute_checked

pytestmark = pytest.mark.redis

SEEN, GUARD = "tx:seen", "tx:guard"


class TestRedisPyInternals:
    def test_a_queued_command_is_its_arguments_and_options(self, client: redis.Redis) -> None:
        """``command_stack`` holds (args, options); EMPTY_RESPONSE marks a reply-less one."""
        pipe = client.pipeline(transaction=True)
        pipe.set("tx:k", "v")
        ((args, options),) = pipe.command_stack
        assert args == ("SET", "tx:k", "v")
        assert isinstance(options, dict) and EMPTY_RESPONSE not in options
        assert isinstance(pipe, Pipeline) and isinstance(pipe.scripts, set)
        assert callable(pipe.load_scripts) and pipe.connection is None

    def test_the_connection_calls_it_makes(self, client: redis.Redis) -> None:
        """A pool connection packs, sends, reads replies and retries as the module expects."""
        pool = client.connection_pool
        inspect.signature(pool.get_connection).bind()  # callable without arguments
        conn = pool.get_connection()
        try:
            packed = conn.pack_commands([("SET", "tx:k", "1"), ("GET", "tx:k")])
            conn.send_packed_command(packed)
            assert [conn.read_response(), conn.read_response()] == [b"OK", b"1"]
            assert conn.retry.call_with_retry(lambda: 7, lambda _: None) == 7
        finally:
            pool.release(conn)


def run(client: redis.Redis, member: str) -> TransactionOutcome:
    """Add ``member`` to SEEN in a checked transaction (a duplicate if already there)."""
    with client.pipeline(transaction=True) as pipe:
        pipe.multi()
        pipe.zadd(SEEN, {member: 1})
        pipe.incr("tx:writes")
        return execute_checked(pipe, (SEEN, GUARD), ("EVAL", CHECK, 2, SEEN, GUARD, member))


class TestExecuteChecked:
    def test_commits_then_refuses_the_duplicate(self, client: redis.Redis) -> None:
        """The first run commits everything; the same member again writes nothing."""
        assert run(client, "a") is TransactionOutcome.COMMITTED
        assert run(client, "a") is TransactionOutcome.DUPLICATE
        assert client.get("tx:writes") == b"1" and not client.exists(GUARD)

    def test_an_error_in_the_block_is_raised(self, client: redis.Redis) -> None:
        """An error in the block is raised, as Pipeline.execute would."""
        client.set("tx:str", "x")
        with client.pipeline(transaction=True) as pipe:
            pipe.multi()
            pipe.incr("tx:writes")
            pipe.zadd("tx:str", {"m": 1})  # WRONGTYPE when EXEC runs it
            with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
                execute_checked(pipe, (SEEN, GUARD), ("EVAL", CHECK, 2, SEEN, GUARD, "b"))
        assert client.get("tx:writes") == b"1"  # Redis does not roll back the rest
