"""One Redis command on a connection held for it, without redis-py's per-command machinery.

The webhook sends one command per delivery (the record script). ``Redis.execute_command``
wraps each in layers (options, observability recorders, response callbacks, a generic
packer that inspects every argument), and taking a connection from the pool and giving
it back adds a lock and four observability records per call. Measured through the
webhook (Flask's test client) that round was 10-15 us of CPU per delivery, and in one
gunicorn whose requests switched between the two ways per round the webhook's rate rose
in each of five rounds (x1.01-x1.25).

So each pool lends one connection to ``call`` for good: the first thread to call takes
it (a thread that finds it busy takes a pooled one, as before). It stays in the pool's
in-use set, so ``pool.disconnect()`` closes it and ``pool.reset()`` after a fork forgets
it; a child never uses its parent's connection (the pid is checked). Before each call it
is checked as the pool checks a connection it hands out (connected, nothing unread: a
server that closed it while idle costs a reconnect, not an error), and anything but an
error reply that interrupts a call (a lost connection, a timeout, an exception in the
middle of a read) disconnects it, so no later call reads a stale reply. Retries follow
the connection's retry policy, as ``execute_command``'s do.

It is the one module that uses redis-py's connection calls directly (``get_connection``,
``release``, ``send_packed_command``, ``read_response``, ``retry``);
``tests/integration/fivetran_events/test_history_command.py`` fails loudly if redis-py
changes them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import redis
from redis.typing import EncodableT

#: hiredis's packer (a dependency of the server extra; without it, redis-py's own).
_pack: Callable[[Any], bytes] | None
try:
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - the Airflow side installs no hiredis
    _pack = None


class _Held:
    """The connection a pool lends to ``call``, and who is using it."""

    __slots__ = ("conn", "lock", "pid")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.pid = os.getpid()


#: The pool's attribute holding its lent connection: kept on the pool, so the two go
#: together (a table of pools would keep every pool alive: a connection refers to its pool).
_LENT = "_fivetran_events_lent"
_LENDING = threading.Lock()


def call(client: redis.Redis, *args: EncodableT) -> Any:
    """Return the reply to the command ``args``, as ``client.execute_command`` would.

    An error reply raises its redis-py exception (``NoScriptError``, ``ResponseError``,
    ...); a lost connection is retried as the client's commands are.
    """
    pool = client.connection_pool
    held: _Held | None = getattr(pool, _LENT, None)
    if held is None or held.pid != os.getpid():
        held = _lend(pool)
    if held.lock.acquire(blocking=False):
        try:
            _ready(held.conn)
            return _send(held.conn, args)
        finally:
            held.lock.release()
    conn = pool.get_connection()  # another thread is using the lent one
    try:
        return _send(conn, args)
    finally:
        pool.release(conn)


def _lend(pool: Any) -> _Held:
    """Take a connection from ``pool`` for ``call`` (once per pool and process)."""
    with _LENDING:
        held: _Held | None = getattr(pool, _LENT, None)
        if held is None or held.pid != os.getpid():
            held = _Held(pool.get_connection())
            setattr(pool, _LENT, held)
        return held


def _ready(conn: Any) -> None:
    """Check the lent connection as the pool checks one it hands out: connected, and
    nothing to read (a server that closed it while idle, or a stray reply), else a new one.
    """
    conn.connect()  # nothing to do when connected
    try:
        if conn.can_read():
            raise redis.ConnectionError("the connection has data")
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        conn.disconnect()
        conn.connect()
        if conn.can_read():
            raise redis.ConnectionError("a new connection has data") from None


def _send(conn: Any, args: tuple[EncodableT, ...]) -> Any:
    packed = [_pack(args)] if _pack is not None else conn.pack_command(*args)

    def attempt() -> Any:
        conn.send_packed_command(packed)
        return conn.read_response()

    try:
        return conn.retry.call_with_retry(attempt, lambda _: conn.disconnect())
    except redis.ResponseError:
        raise  # a whole error reply was read: the connection is as it was
    except BaseException:
        conn.disconnect()  # whatever is left unread must never answer the next call
        raise
