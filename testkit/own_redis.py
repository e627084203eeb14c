"""redis-server processes of a test's own (not the suite's shared one), stopped by PID.

The fault tests drive a real Redis into states the shared server must never be in:
out of memory, a read-only replica, a failed save, a busy script, loading its data set,
restarted. Each runs on a free loopback port in a directory of the test's own.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .processes import free_port, poll_until, stop_group

REDIS_SERVER = shutil.which("redis-server") or "redis-server"


@dataclass
class OwnRedis:
    """One redis-server process; ``restart()`` keeps its port, directory and options."""

    directory: Path
    args: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            **{"socket_timeout": 5, **kwargs},
        )

    def start(self, wait: bool = True) -> None:
        """Start it; with ``wait``, return once it answers (LOADING counts as answering)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        log = (self.directory / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--save",
                "",
                "--appendonly",
                "no",
                *self.args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its group: it and its BGSAVE/AOF-rewrite children
        )
        log.close()
        if wait:
            self.wait_answering()

    def wait_answering(self, timeout: float = 20.0) -> None:
        probe = redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=1, retry=Retry(NoBackoff(), 0)
        )

        def answers() -> bool:
            assert self.proc is not None and self.proc.poll() is None, "redis-server exited"
            try:
                probe.ping()
                return True
            except redis.BusyLoadingError:
                return True  # it answers; LOADING is what some tests want to see
            except redis.ConnectionError:
                return False
            finally:
                probe.close()

        poll_until(answers, f"redis-server on port {self.port}", timeout, interval=0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop it by PID (SIGTERM: Redis flushes its AOF and exits)."""
        if self.proc is not None:
            stop_group(self.proc, timeout=20, sig=sig)

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def own_redis(directory: Path, *args: str) -> Iterator[OwnRedis]:
    """Run a redis-server of the test's own for the block; stop it by PID after."""
    server = OwnRedis(directory, args)
    server.start()
    try:
        yield server
    finally:
        server.stop(signal.SIGKILL)


def delivery_count(metrics_text: str, outcome: str) -> float:
    """Read ``fivetran_events_webhook_deliveries_total{outcome=...}`` from /metrics text."""
    key = f'fivetran_events_webhook_deliveries_total{{outcome="{outcome}"}}'
    return next(
        (float(line.split()[-1]) for line in metrics_text.splitlines() if line.startswith(key)), 0.0
    )
