"""A replicated Redis of a test's own: a primary, a replica and three sentinels.

All are real ``redis-server`` processes on free loopback ports (the sentinels are
``redis-server sentinel.conf --sentinel``), each in a directory of the test's own and
stopped by its PID. The sentinels fail over quickly (down after 1 s) so a fault test
stays short. Optionally every node requires a password (the sentinels one of their own)
and speaks only TLS, with certificates made by ``openssl`` for 127.0.0.1.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis

from .own_redis import REDIS_SERVER, OwnRedis
from .processes import free_port, poll_until, stop_group

SERVICE = "svc"
#: Both data nodes append to an AOF fsynced every second, as deploy/compose.yaml runs them.
DATA_ARGS = ("--appendonly", "yes", "--appendfsync", "everysec")


def make_tls(folder: Path) -> Path:
    """Write a CA and a server certificate for 127.0.0.1 signed by it; return the folder."""
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    key = ("-newkey", "rsa:2048", "-nodes")
    openssl(
        "req", "-x509", *key, "-days", "2", "-subj", "/CN=ca", "-keyout", "ca.key", "-out", "ca.crt"
    )
    openssl("req", *key, "-subj", "/CN=127.0.0.1", "-keyout", "server.key", "-out", "server.csr")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    sign = ("-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-extfile", "san.ext")
    openssl("x509", "-req", "-in", "server.csr", *sign, "-days", "2", "-out", "server.crt")
    return folder


@dataclass
class SentinelSetup:
    """The processes of one replicated Redis and the URL that reaches it through Sentinel."""

    directory: Path
    primary: OwnRedis
    replica: OwnRedis
    password: str | None = None
    sentinel_password: str | None = None
    #: The folder of ca.crt, server.crt and server.key when every node speaks TLS.
    tls: Path | None = None
    sentinel_ports: list[int] = field(default_factory=list)
    sentinels: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def url(self, db: int = 0) -> str:
        """The ``redis+sentinel://`` URL (``rediss+sentinel://`` and options under TLS)."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        query = []
        if self.sentinel_password:
            query.append(f"sentinel_password={quote(self.sentinel_password, safe='')}")
        if self.tls:
            query += ["sentinel_ssl=true", f"ssl_ca_certs={quote(str(self.tls / 'ca.crt'))}"]
        scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
        return f"{scheme}://{auth}{hosts}/{SERVICE}/{db}" + ("?" + "&".join(query) if query else "")

    def _tls_kwargs(self) -> dict[str, Any]:
        return {"ssl": True, "ssl_ca_certs": str(self.tls / "ca.crt")} if self.tls else {}

    def node(self, server: OwnRedis) -> redis.Redis:
        """A direct client of one data node (not through the sentinels)."""
        return server.client(password=self.password, **self._tls_kwargs())

    def sentinel(self, i: int = 0) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.sentinel_ports[i],
            socket_timeout=2,
            password=self.sentinel_password,
            **self._tls_kwargs(),
        )

    def primary_port(self) -> int:
        """The port the first sentinel names as the primary now."""
        host_port: Any = self.sentinel().sentinel_get_master_addr_by_name(SERVICE)
        return int(host_port[1])

    def node_args(self) -> tuple[str, ...]:
        """A data node's options beyond its port: AOF, passwords, TLS."""
        args: tuple[str, ...] = DATA_ARGS
        if self.password:
            args += ("--requirepass", self.password, "--masterauth", self.password)
        return args + tuple(a for line in self._tls_lines() for a in ("--" + line).split(" ", 1))

    def _tls_lines(self) -> list[str]:
        if self.tls is None:
            return []
        return [
            f"tls-cert-file {self.tls / 'server.crt'}",
            f"tls-key-file {self.tls / 'server.key'}",
            f"tls-ca-cert-file {self.tls / 'ca.crt'}",
            "tls-auth-clients no",
            "tls-replication yes",  # replicas and sentinels reach the nodes over TLS too
        ]

    def start_node(self, server: OwnRedis) -> None:
        """Start a data node; under TLS its only port is the TLS one (same number)."""
        if self.tls is None:
            server.start()
            return
        server.args = (*server.args, "--port", "0", "--tls-port", str(server.port))
        server.start(wait=False)
        poll_until(lambda: _answers(self.node(server)), f"TLS redis on {server.port}", 20)

    def start_sentinel(self, i: int) -> None:
        port = free_port()
        folder = self.directory / f"sentinel{i}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [
            f"port {0 if self.tls else port}",
            *([f"tls-port {port}", *self._tls_lines()] if self.tls else []),
            "bind 127.0.0.1",
            f"dir {folder}",
            "sentinel resolve-hostnames no",
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 2",
            f"sentinel down-after-milliseconds {SERVICE} 1000",
            f"sentinel failover-timeout {SERVICE} 5000",
            f"sentinel parallel-syncs {SERVICE} 1",
        ]
        if self.password:
            lines.append(f"sentinel auth-pass {SERVICE} {_conf_quoted(self.password)}")
        if self.sentinel_password:
            lines.append(f"requirepass {_conf_quoted(self.sentinel_password)}")
            lines.append(f"sentinel sentinel-pass {_conf_quoted(self.sentinel_password)}")
        conf = folder / "sentinel.conf"  # sentinel rewrites it: a file of its own
        conf.write_text("\n".join(lines) + "\n")
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
                info = self.node(self.replica).info("replication")
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


def _conf_quoted(value: str) -> str:
    """A value as a double-quoted string of a Redis configuration file."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


@contextmanager
def sentinel_setup(
    directory: Path,
    *,
    password: str | None = None,
    sentinel_password: str | None = None,
    tls: bool = False,
) -> Iterator[SentinelSetup]:
    """Run a primary, a replica of it and three sentinels; stop them all by PID after."""
    with ExitStack() as stack:
        primary = OwnRedis(directory / "primary")
        setup = SentinelSetup(directory, primary, primary, password, sentinel_password)
        setup.tls = make_tls(directory / "tls") if tls else None
        stack.callback(setup.stop)
        primary.args = setup.node_args()
        setup.start_node(primary)
        setup.replica = OwnRedis(
            directory / "replica",
            (*setup.node_args(), "--replicaof", "127.0.0.1", str(primary.port)),
        )
        setup.start_node(setup.replica)
        for i in range(3):
            setup.start_sentinel(i)
        setup.wait_settled()
        yield setup
