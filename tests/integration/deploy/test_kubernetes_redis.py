"""The sentinel overlay's Redis pod, run here as processes: its init container prints the
two users with `fivetran-events redis acl`, and its Redis container's script starts a
real redis-server with them, append-only and noeviction.

As in test_kubernetes_run.py only what cannot be the cluster's changes: temporary
folders for the mounts, a free port for 6379, 127.0.0.1 for 0.0.0.0, passwords for the
Secret's keys. No sentinel answers here, so the pod starts as a replica of pod 0 (whose
name does not resolve): it still serves, and every ACL check comes before a replica's
READONLY, so the users' rights show.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from fivetran_events.text import as_text as redis_text
from testkit.processes import free_port, poll_until, stop_group

from .kube import OVERLAYS, Container, containers, kubelet_secret_folder, localizer, render

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
PASSWORDS = {
    "admin_password": "k8s-redis-admin-0123456789abcdef",
    "fivetran_events_redis_app_password": "k8s-redis-app-0123456789abcdef01",
    "fivetran_events_redis_airflow_password": "k8s-redis-airflow-0123456789abcde",
}
SCRIPTS = OVERLAYS / "sentinel"


def pod_container(name: str) -> Container:
    [c] = [c for c in containers(render("sentinel")) if c.spec["name"] == name]
    return c


def environment(c: Container, local: Callable[[str], str]) -> dict[str, str]:
    env = {name: local(value) for name, value in c.env(render("sentinel")).items()}
    for name, value in env.items():
        if value.startswith("secret:fivetran-events-redis-acl/"):
            env[name] = PASSWORDS[value.rsplit("/", 1)[1]]
        elif value == "field:metadata.namespace":
            env[name] = "fivetran-events"
    return {**env, "PATH": f"{BIN}:/usr/bin:/bin"}


def start(c: Container, local: Callable[[str], str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [local(a) for a in c.spec["command"]],
            env=environment(c, local),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def client(port: int, user: str, password: str) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1", port=port, username=user, password=password, socket_timeout=5
    )


def wait_answering(proc: subprocess.Popen[bytes], admin: redis.Redis, log: Path) -> None:
    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(log.read_text())
        try:
            return bool(admin.ping())
        except redis.ConnectionError:
            return False

    poll_until(up, f"the process logging to {log.name}", timeout=30)


def test_the_redis_pod_serves_the_two_users(tmp_path: Path) -> None:
    acl, server, sentinel = (pod_container(n) for n in ("acl", "redis", "sentinel"))
    port, sentinel_port = free_port(), free_port()
    mounts = {**acl.mounts(), **server.mounts(), **sentinel.mounts()}
    paths = {mount: tmp_path / mount.strip("/").replace("/", "_") for mount in mounts}
    for mount, folder in paths.items():
        volume = mounts[mount]
        if "secret" in volume or "projected" in volume:  # as the kubelet writes them
            c = acl if mount in acl.mounts() else sentinel
            # A Secret volume without items holds every key of the Secret.
            items = c.secret_files(mount) or {key: ("", key) for key in PASSWORDS}
            files = {name: PASSWORDS[key] for name, (_, key) in items.items()}
            kubelet_secret_folder(folder, files)
        else:
            folder.mkdir()
    local = localizer(paths, {6379: port, 26379: sentinel_port})
    # The ConfigMap of scripts (configMapGenerator's files), as the pod mounts it.
    for script in ("primary.sh", "redis.sh", "sentinel.sh"):
        (paths["/scripts"] / script).write_text(local((SCRIPTS / script).read_text()))

    init = subprocess.run(
        [local(a) for a in [*acl.spec["command"]]],
        env=environment(acl, local),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert init.returncode == 0, init.stderr
    printed = (paths["/run/redis-acl"] / "fivetran-events.acl").read_text()
    assert all(p not in printed for p in PASSWORDS.values()), "passwords only hashed"

    procs = [start(server, local, tmp_path / "redis.log")]
    try:
        admin = client(port, "default", PASSWORDS["admin_password"])
        wait_answering(procs[0], admin, tmp_path / "redis.log")
        assert admin.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        assert admin.config_get("appendonly")["appendonly"] == "yes"

        app = client(port, "fivetran-events", PASSWORDS["fivetran_events_redis_app_password"])
        airflow = client(
            port, "fivetran-events-airflow", PASSWORDS["fivetran_events_redis_airflow_password"]
        )
        assert app.ping()
        # NOPERM, not an authentication error: Airflow's user logged in and was refused.
        for command in ("FLUSHALL", "CONFIG SET maxmemory-policy allkeys-lru"):
            with pytest.raises(redis.exceptions.NoPermissionError):
                airflow.execute_command(*command.split())
        with pytest.raises(redis.AuthenticationError):
            client(port, "fivetran-events", "not-the-password-0123456789").ping()

        # The Sentinel beside it, told (pod names do not resolve here) that this Redis is
        # the primary: the two users may ask where it is, and change nothing.
        (paths["/scripts"] / "primary.sh").write_text("echo 127.0.0.1\n")
        procs.append(start(sentinel, local, tmp_path / "sentinel.log"))
        sentinel_admin = client(sentinel_port, "default", PASSWORDS["admin_password"])
        wait_answering(procs[1], sentinel_admin, tmp_path / "sentinel.log")
        for user, key in (
            ("fivetran-events", "fivetran_events_redis_app_password"),
            ("fivetran-events-airflow", "fivetran_events_redis_airflow_password"),
        ):
            asking = client(sentinel_port, user, PASSWORDS[key])
            where = asking.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "fte")
            assert [redis_text(w) for w in where] == ["127.0.0.1", str(port)]
            for command in ("FAILOVER fte", "REMOVE fte", "SET fte quorum 1"):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    asking.execute_command("SENTINEL", *command.split())
    finally:
        for proc in procs:
            stop_group(proc)
