"""A redis-server of a test's own that the test stops and starts again (an outage).

The suite's Redis is shared by every test and by the session's Airflow, so outages are
staged on a dedicated server: pytest-redis's ``RedisExecutor`` on a free loopback port,
append-only in a temporary folder, so a restart on the same port reloads the same data
(as a production Redis with AOF does). It runs in a session of its own and is stopped
by that process group only.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pytest_redis.executor import RedisExecutor

from testkit.servers import free_port
from testkit.support import conn_uri

#: Key prefix of the history on the dedicated server.
PREFIX = "outage:"


class OwnRedis:
    """A dedicated redis-server: ``stop()``, ``start()``, ``back_after(seconds)``."""

    def __init__(self, datadir: Path) -> None:
        self.port = free_port()
        self.executor = RedisExecutor(
            shutil.which("redis-server") or "redis-server",
            databases=1,
            redis_timeout=30,
            loglevel="warning",
            host="127.0.0.1",
            port=self.port,
            appendonly="yes",
            datadir=datadir,
        )
        self._timers: list[threading.Timer] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def conn_uri(self) -> str:
        """The ``AIRFLOW_CONN_...`` URI of the history on this server."""
        return conn_uri(self.url, PREFIX)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def start(self) -> None:
        if not self.executor.running():
            self.executor.start()

    def stop(self) -> None:
        """Stop the server (SIGTERM: Redis flushes its append-only file first)."""
        if self.executor.running():
            self.executor.stop()

    def back_after(self, seconds: float) -> threading.Timer:
        """Start the server again ``seconds`` from now, from a thread."""
        timer = threading.Timer(seconds, self.start)
        self._timers.append(timer)
        timer.start()
        return timer

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
            if timer.is_alive():
                timer.join(30)
        self.stop()


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    """A running dedicated redis-server, stopped (and its data removed) after the test."""
    # A short folder: the executor also opens a unix socket there (path length limit).
    datadir = Path(tempfile.mkdtemp(prefix="fte-outage-"))
    server = OwnRedis(datadir)
    server.start()
    try:
        yield server
    finally:
        server.close()
        shutil.rmtree(datadir, ignore_errors=True)
