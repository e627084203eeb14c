"""A replicated Redis of a test's own: a primary, a replica and three sentinels.

All are real ``redis-server`` processes on free loopback ports (the sentinels are
``redis-server sentinel.conf --sentinel``), each in a directory of the test's own and
stopped by its PID. The sentinels fail over quickly (down after 1 s) so a fault test
stays short.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from .own_redis import REDIS_SERVER, OwnRedis
from .processes import free_port, poll_until, stop_group

SERVICE = "svc"
#: Both data nodes append to an AOF fsynced every second, as deploy/compose.yaml runs them.
DATA_ARGS = ("--appendonly", "yes", "--appendfsync", "everysec")


@dataclass
class SentinelSetup:
    """The processes of one replicated Redis and the URL that reaches it through Sentinel."""

    directory: Path
    primary: OwnRedis
    replica: OwnRedis
    sentinel_ports: list[int] = field(default_factory=list)
    sentinels: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def url(self, scheme: str = "redis+sentinel", db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"{scheme}://{hosts}/{SERVICE}/{db}"

    def sentinel(self, i: int = 0) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.sentinel_ports[i], socket_timeout=2)

    def primary_port(self) -> int:
        """The port the first sentinel names as the primary now."""
        host_port: Any = self.sentinel().sentinel_get_master_addr_by_name(SERVICE)
        return int(host_port[1])

    def start_sentinel(self, i: int) -> None:
        port = free_port()
        folder = self.directory / f"sentinel{i}"
        folder.mkdir(parents=True, exist_ok=True)
        conf = folder / "sentinel.conf"  # sentinel rewrites it: a file of its own
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
            "sentinel resolve-hostnames no\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 5000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        with (folder / "sentinel.log").open("ab") as log:
            proc = subprocess.Popen(
                [REDIS_SERVER, str(conf), "--sentinel"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.sentinel_ports.append(port)
        self.sentinels.append(proc)

    def wait_settled(self, timeout: float = 30.0) -> None:
        """Wait until the replica is in sync and every sentinel knows the others and it."""

        def settled() -> bool:
            try:
                info = self.replica.client().info("replication")
                if info.get("master_link_status") != "up":
                    return False
                for i in range(len(self.sentinel_ports)):
                    s = self.sentinel(i)
                    others: Any = s.sentinel_sentinels(SERVICE)
                    if len(others) < len(self.sentinel_ports) - 1:
                        return False
                    if not s.sentinel_slaves(SERVICE):
                        return False
            except redis.RedisError:
                return False
            return True

        poll_until(settled, "the replica and three sentinels to settle", timeout, interval=0.2)

    def stop(self) -> None:
        for proc in self.sentinels:
            stop_group(proc, timeout=10, sig=signal.SIGKILL)
        self.primary.stop(signal.SIGKILL)
        self.replica.stop(signal.SIGKILL)


@contextmanager
def sentinel_setup(directory: Path) -> Iterator[SentinelSetup]:
    """Run a primary, a replica of it and three sentinels; stop them all by PID after."""
    with ExitStack() as stack:
        primary = OwnRedis(directory / "primary", DATA_ARGS)
        setup = SentinelSetup(directory, primary, primary)  # the replica follows below
        stack.callback(setup.stop)
        primary.start()
        setup.replica = OwnRedis(
            directory / "replica", (*DATA_ARGS, "--replicaof", "127.0.0.1", str(primary.port))
        )
        setup.replica.start()
        for i in range(3):
            setup.start_sentinel(i)
        setup.wait_settled()
        yield setup
