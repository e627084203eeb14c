"""deploy/compose.yaml's logins, without a container engine: Redis's two users from
``fivetran-events redis acl`` (its ACL file, the URLs the app and Airflow are given),
``maxmemory`` with ``noeviction``, and an Airflow login whose passwords file the API
server shares with airflow-init. What the containers run is run here as processes, on
the secret files deploy/compose-secrets.sh makes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import yaml

from testkit.own_redis import OwnRedis
from testkit.processes import poll_until

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    out = subprocess.run(
        [str(BIN / "docker-compose"), "-f", "compose.yaml", "config", "--format", "json"],
        cwd=DEPLOY,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.stderr.strip() == "", out.stderr
    return dict(json.loads(out.stdout))


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory, compose: dict[str, Any]) -> Path:
    """/run/secrets as Compose mounts it: each secret's file under its name (or target)."""
    made = tmp_path_factory.mktemp("secrets")
    subprocess.run(
        ["bash", str(DEPLOY / "compose-secrets.sh"), str(made)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    run = tmp_path_factory.mktemp("run")
    for name, spec in compose["secrets"].items():
        shutil.copy(made / Path(spec["file"]).name, run / name)
    return run


def compose_file() -> dict[str, Any]:
    """The file as written (the replicated profile's services included)."""
    return dict(yaml.safe_load((DEPLOY / "compose.yaml").read_text()))


def secret_names(service: dict[str, Any]) -> dict[str, str]:
    """A service's secrets: name -> file name under /run/secrets."""
    return {s["source"]: Path(s.get("target") or s["source"]).name for s in service["secrets"]}


def started(tmp: Path, args: list[str]) -> OwnRedis:
    server = OwnRedis(tmp, tuple(args))
    server.start(wait=False)  # its readiness probe is the default user's, which is off
    return server


class TestRedis:
    def test_no_eviction_and_the_acl_file(self, compose: dict[str, Any]) -> None:
        services = compose["services"]
        for name in ("redis", "redis-primary", "redis-replica"):
            command = compose_file()["services"][name]["command"]
            assert command[command.index("--maxmemory-policy") + 1] == "noeviction", name
            assert command[command.index("--maxmemory") + 1] == "${FTE_REDIS_MAXMEMORY:-1gb}"
        command = services["redis"]["command"]
        assert command[command.index("--maxmemory") + 1] == "1gb"
        acl_file = command[command.index("--aclfile") + 1]
        writer = services["redis-acl"]
        assert f"> {acl_file}" in " ".join(writer["command"])
        assert services["redis"]["depends_on"]["redis-acl"]["condition"] == (
            "service_completed_successfully"
        )
        for name in ("web", "worker"):
            assert "FIVETRAN_EVENTS_REDIS_URL" not in services[name]["environment"]
            assert "fivetran_events_redis_url" in secret_names(services[name])

    def test_the_users_work_as_deployed(
        self, compose: dict[str, Any], secrets: Path, tmp_path: Path
    ) -> None:
        """redis-acl's command writes the ACL file; a redis-server started with it takes
        the app's URL for everything the app does and Airflow's connection for reads only;
        the default user is off."""
        services = compose["services"]
        writer = services["redis-acl"]
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("FIVETRAN_EVENTS_")},
            **writer["environment"],
            "FIVETRAN_EVENTS_SECRETS_DIR": str(secrets),
            "PATH": f"{BIN}:{os.environ['PATH']}",
        }
        acl_file = tmp_path / "users.acl"
        script = " ".join(writer["command"]).replace("$$", "$")
        script = script.replace("/acl/users.acl", str(acl_file))
        subprocess.run(["sh", "-c", script], env=env, check=True, timeout=60)
        args = [a.replace("/acl/users.acl", str(acl_file)) for a in services["redis"]["command"]]
        server = started(tmp_path / "redis", args[1:])
        try:
            app_url = urlsplit((secrets / "fivetran_events_redis_url").read_text())
            app = redis.Redis.from_url(
                app_url._replace(
                    netloc=app_url.netloc.replace("redis:6379", f"127.0.0.1:{server.port}")
                ).geturl()
            )
            poll_until(lambda: _answers(app), "redis-server with compose's ACL file")
            assert (
                app.set("fte:connectors:x", "1")
                and app.info("memory")["maxmemory_policy"] == "noeviction"
            )
            connections = json.loads((secrets / "airflow_connections").read_text())
            af_url = urlsplit(connections["fivetran_events_redis"])
            assert af_url.username == "fivetran-events-airflow"
            airflow = redis.Redis.from_url(
                af_url._replace(
                    netloc=af_url.netloc.replace("redis:6379", f"127.0.0.1:{server.port}")
                ).geturl()
            )
            assert airflow.hgetall("fte:connectors") == {}
            with pytest.raises(redis.exceptions.NoPermissionError):
                airflow.hset("fte:connectors", "c", "x")
            with pytest.raises(redis.AuthenticationError):
                server.client().ping()
            check = services["redis"]["healthcheck"]["test"][1].replace("$$", "$")
            check = check.replace("/run/secrets", str(secrets))
            check = check.replace("redis-cli", f"redis-cli -p {server.port}")
            assert subprocess.run(["sh", "-c", check], timeout=30, check=False).returncode == 0
        finally:
            server.stop()


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


class TestAirflowLogin:
    def test_the_api_server_reads_the_passwords_airflow_init_writes(
        self, compose: dict[str, Any], secrets: Path, tmp_path: Path
    ) -> None:
        """airflow-init writes admin's and the worker's passwords into the volume the API
        server mounts at the path Airflow is told; both match their secret files."""
        services = compose["services"]
        init, api = services["airflow-init"], services["airflow-api"]
        path = api["environment"]["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
        folder = str(Path(path).parent)
        volumes = {
            name: {v["source"] for v in services[name]["volumes"] if v["target"] == folder}
            for name in ("airflow-init", "airflow-api", "airflow-scheduler", "airflow-triggerer")
        }
        assert all(len(v) == 1 for v in volumes.values()) and len(set.union(*volumes.values())) == 1
        run = tmp_path / "run"
        run.mkdir()
        for name, file in secret_names(init).items():
            shutil.copy(secrets / name, run / file)
        auth = tmp_path / "auth"
        auth.mkdir()
        # The rendered file keeps Compose's $$ (a literal $ for the container's shell).
        script = init["command"][0].replace("$$", "$").split(" && chown", 1)[0]
        script = script.replace("/run/secrets", str(run)).replace(folder, str(auth))
        subprocess.run(["bash", "-c", script], check=True, timeout=60)
        written = json.loads((auth / Path(path).name).read_text())
        assert written == {
            "admin": (run / "airflow_admin_password").read_text(),
            "fivetran-events": (run / "airflow_password").read_text(),
        }
        users = dict(
            u.split(":")
            for u in api["environment"]["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(",")
        )
        assert set(users) == set(written)

    def test_airflow_reads_its_redis_connection_from_a_file(self, compose: dict[str, Any]) -> None:
        for name in (
            "airflow-api",
            "airflow-scheduler",
            "airflow-triggerer",
            "airflow-dag-processor",
        ):
            service = compose["services"][name]
            env = service["environment"]
            assert not [k for k in env if k.startswith("AIRFLOW_CONN_")]
            kwargs = json.loads(env["AIRFLOW__SECRETS__BACKEND_KWARGS"])
            assert env["AIRFLOW__SECRETS__BACKEND"].endswith("LocalFilesystemBackend")
            mounted = {f"/run/secrets/{f}" for f in secret_names(service).values()}
            assert kwargs["connections_file_path"] in mounted
