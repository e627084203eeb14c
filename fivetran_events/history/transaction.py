"""One optimistic Redis transaction in one round trip: WATCH, a check, MULTI ... EXEC.

This is the one place that reaches into redis-py's internals (``Pipeline.command_stack``,
``EMPTY_RESPONSE``, ``Connection.pack_commands``/``read_response``); the tests in
``tests/fivetran_events/test_history_transaction.py`` fail loudly if redis-py changes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, Protocol, TypeVar, cast

import redis
from redis.client import EMPTY_RESPONSE, Pipeline

T = TypeVar("T")


class _Retry(Protocol):
    def call_with_retry(self, do: Callable[[], T], fail: Callable[[Exception], Any]) -> T: ...


class _Connection(Protocol):
    """The calls of redis-py's (untyped) ``Connection`` this module makes."""

    retry: _Retry

    def pack_commands(self, commands: Sequence[Sequence[Any]]) -> list[bytes]: ...
    def send_packed_command(self, command: list[bytes]) -> None: ...
    def read_response(self) -> Any: ...
    def disconnect(self) -> None: ...


class TransactionOutcome(Enum):
    """How one checked transaction ended (``execute_checked``)."""

    COMMITTED = "committed"
    DUPLICATE = "duplicate"  # the check said so; nothing was written
    CONFLICT = "conflict"  # a watched key changed under us; nothing was written


def execute_checked(
    pipe: Pipeline, watch: Sequence[str], check: tuple[Any, ...]
) -> TransactionOutcome:
    """Run ``pipe``'s MULTI block unless ``check`` finds a duplicate, in one round trip.

    Sends WATCH ``watch``, ``check`` (a command that returns 1 for a duplicate after
    changing a watched key, 0 otherwise), MULTI, the queued commands and EXEC together.
    redis-py would send WATCH and each read after it as a round trip of its own; since
    Redis runs one connection's commands in order, sending them in one write is the same
    transaction. Raises the first error of the check or the block, like
    ``Pipeline.execute``. Leaves ``pipe`` holding its connection; reset it (or leave its
    ``with`` block) to return it.
    """
    if pipe.scripts:
        pipe.load_scripts()
    queued = [args for args, options in pipe.command_stack if EMPTY_RESPONSE not in options]
    commands = [("WATCH", *watch), check, ("MULTI",), *queued, ("EXEC",)]
    if pipe.connection is None:
        pipe.connection = pipe.connection_pool.get_connection()
    conn = cast(_Connection, pipe.connection)
    packed = conn.pack_commands(commands)

    def attempt() -> tuple[Any, Any]:
        conn.send_packed_command(packed)
        # Read every reply before raising, so the connection never falls out of step.
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except redis.ResponseError as exc:
                replies.append(exc)
        return replies[1], replies[-1]

    def failed(_: Exception) -> None:
        # Disconnecting drops the WATCH too, so the next attempt starts from scratch. If
        # the lost EXEC did commit, that attempt's check finds the duplicate.
        conn.disconnect()

    try:
        found, result = conn.retry.call_with_retry(attempt, failed)
    except BaseException:
        conn.disconnect()
        raise
    if isinstance(found, Exception):
        raise found
    if isinstance(result, Exception):  # EXECABORT: a command was refused when queued
        raise result
    if result is None:
        return TransactionOutcome.DUPLICATE if found == 1 else TransactionOutcome.CONFLICT
    for reply in result:
        if isinstance(reply, redis.ResponseError):
            raise reply
    return TransactionOutcome.COMMITTED
