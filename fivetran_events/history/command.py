"""One Redis command on a pooled connection, without redis-py's per-command machinery.

The webhook sends one command per delivery (the record script). ``Redis.execute_command``
wraps each in layers (options, observability recorders, response callbacks, a generic
packer that inspects every argument): about half of the Python calls a delivery's write
makes. This does what it does for one command (take a connection from the client's pool,
send, read, retry and reconnect by the client's retry policy, give the connection back)
and packs the arguments with hiredis in one call. It is the one module that uses
redis-py's connection calls directly (``get_connection``, ``send_packed_command``,
``read_response``, ``retry``); ``tests/integration/fivetran_events/test_history_command.py``
fails loudly if redis-py changes them.
"""

from __future__ import annotations

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


def call(client: redis.Redis, *args: EncodableT) -> Any:
    """Return the reply to the command ``args``, as ``client.execute_command`` would.

    An error reply raises its redis-py exception (``NoScriptError``, ``ResponseError``,
    ...); a lost connection is retried as the client's commands are.
    """
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        packed = [_pack(args)] if _pack is not None else conn.pack_command(*args)

        def attempt() -> Any:
            conn.send_packed_command(packed)
            return conn.read_response()

        return conn.retry.call_with_retry(attempt, lambda _: conn.disconnect())
    finally:
        pool.release(conn)
