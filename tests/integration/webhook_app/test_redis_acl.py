"""``fivetran-events redis acl`` applied to a real redis-server: the app works through its
user, and every write of Airflow's user to a key it does not own answers NOPERM, asked
first with ``ACL DRYRUN`` (so a wrong ACL fails the test before FLUSHALL or SHUTDOWN
could run) and then for real. The Airflow side through its user: the system test
tests/system/airflow_plugin/test_redis_acl.py; the printed lines alone:
tests/unit/webhook_app/test_redis_acl_printed.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import SecretStr

from fivetran_events import Settings
from fivetran_events.keys import (
    CONNECTOR_SETS,
    ConnectorKeys,
    connectors_key,
    deliveries_key,
    delivery_key,
    due_key,
    last_test_event_key,
    queue_name,
    readiness_key,
    reconcile_key,
    sweep_wake_key,
    sync_deliveries_key,
    tables_key,
    wait_from_key,
)
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import URI, post_event
from testkit.own_redis import OwnRedis, own_redis
from testkit.processes import poll_until
from testkit.redis_acl import (
    AIRFLOW_PASSWORD,
    APP_PASSWORD,
    acl_env,
    acl_lines,
    app_url,
    apply_acl,
    as_user,
)
from testkit.support import SECRET, TOKEN
from testkit.worker_process import worker_env
from webhook_app import create_app

PREFIX = "test:"
ENV = acl_env(PREFIX)
CONNECTOR = "assimilate_seem"


def acl(*args: str, **env: str) -> list[str]:
    return acl_lines(PREFIX, *args, **env)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnRedis]:
    """A redis-server with the printed users (its default user stays, as the admin's)."""
    with own_redis(tmp_path_factory.mktemp("acl"), "--maxmemory-policy", "noeviction") as srv:
        apply_acl(srv, PREFIX)
        yield srv


def answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def app_keys() -> dict[str, str]:
    """One key of every kind the app writes, by what it is (keys.py)."""
    history = ConnectorKeys(PREFIX, CONNECTOR)
    did = f"{CONNECTOR}:s1:abc"
    return {
        **{f"history {name}": getattr(history, name) for name in CONNECTOR_SETS},
        "connectors": connectors_key(PREFIX),
        "delivery": delivery_key(PREFIX, did),
        "sync's deliveries": sync_deliveries_key(PREFIX, CONNECTOR, "s1"),
        "all deliveries": deliveries_key(PREFIX),
        "due": due_key(PREFIX),
        "wake": sweep_wake_key(PREFIX),
        "readyz": readiness_key(PREFIX),
        "reconcile": reconcile_key(PREFIX),
        "tables": tables_key(PREFIX, CONNECTOR),
        "test event": last_test_event_key(PREFIX),
        "rq queue": f"rq:queue:{queue_name(PREFIX)}",
        "rq job": "rq:job:test-0-fwd-1",
        "rq workers": "rq:workers",
    }


def forbidden(key: str) -> list[tuple[str, ...]]:
    """Writes, deletes and expiries of ``key``, and commands nobody but an admin runs."""
    return [
        ("SET", key, "x"),
        ("DEL", key),
        ("UNLINK", key),
        ("EXPIRE", key, "10"),
        ("PEXPIREAT", key, "1"),
        ("PERSIST", key),
        ("RENAME", key, f"{key}:moved"),
        ("ZADD", key, "1", "x"),
        ("ZREMRANGEBYSCORE", key, "-inf", "+inf"),
        ("HSET", key, "f", "v"),
        ("SADD", key, "x"),
        ("LPUSH", key, "x"),
        ("GETDEL", key),
        ("COPY", wait_from_key(PREFIX, "t"), key),
        ("SORT", key, "STORE", key),
        ("RESTORE", key, "0", "x"),
    ]


ADMIN_ONLY: list[tuple[str, ...]] = [
    ("FLUSHALL",),
    ("FLUSHDB",),
    ("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"),
    ("CONFIG", "GET", "*"),
    ("SHUTDOWN", "NOSAVE"),
    ("DEBUG", "SLEEP", "0"),
    ("ACL", "SETUSER", "x", "on", ">p", "+@all", "~*"),
    ("ACL", "LIST"),
    ("KEYS", "*"),
    ("SCAN", "0"),
    ("RANDOMKEY",),
    ("SWAPDB", "0", "1"),
    ("SCRIPT", "FLUSH"),
    ("EVAL", "return redis.call('flushall')", "0"),
    ("FUNCTION", "FLUSH"),
    ("MONITOR",),
    ("CLIENT", "KILL", "TYPE", "normal"),
    ("REPLICAOF", "127.0.0.1", "1"),
    ("INFO",),
    ("PUBLISH", f"{PREFIX}changes:{CONNECTOR}", "x"),
]


#: Asked by dry run alone: redis-py cannot read MONITOR's stream as an answer, and Redis
#: refuses DEBUG to everyone unless enable-debug-command allows it (before the ACL).
DRY_RUN_ONLY = {"MONITOR", "DEBUG"}


def denied(answer: Any) -> bool:
    text = answer.decode() if isinstance(answer, bytes) else str(answer)
    return "no permissions" in text


class TestAclFile:
    def test_the_acl_file_form_loads_and_turns_the_default_user_off(self, tmp_path: Path) -> None:
        """``--format acl-file`` is what redis-server's ``aclfile`` takes (Compose uses it)."""
        users = tmp_path / "users.acl"
        users.write_text("\n".join(acl("--format", "acl-file", "--default-user-off")) + "\n")
        srv = OwnRedis(tmp_path / "r", ("--aclfile", str(users)))
        srv.start(wait=False)  # its readiness probe is the default user's, now off
        try:
            app = as_user(srv, "fivetran-events", APP_PASSWORD)
            poll_until(lambda: answers(app), "redis-server with the ACL file")
            assert as_user(srv, "fivetran-events-airflow", AIRFLOW_PASSWORD).ping()
            with pytest.raises(redis.AuthenticationError):
                srv.client().ping()
            with pytest.raises(redis.AuthenticationError):
                as_user(srv, "fivetran-events-airflow", APP_PASSWORD).ping()
        finally:
            srv.stop()


class TestAirflowsUser:
    def test_every_forbidden_write_is_noperm(self, server: OwnRedis) -> None:
        """Dry run first, then for real; nothing the app wrote changes."""
        admin = server.client()
        keys = app_keys()
        for key in keys.values():
            admin.set(key, "app's") if not key.startswith(PREFIX + "h:") else admin.zadd(
                key, {"app's": 1}
            )
        before = {key: admin.dump(key) for key in keys.values()}
        af = as_user(server, "fivetran-events-airflow", AIRFLOW_PASSWORD)
        attempts = [cmd for key in keys.values() for cmd in forbidden(key)] + ADMIN_ONLY
        allowed = [
            cmd
            for cmd in attempts
            if not denied(admin.execute_command("ACL", "DRYRUN", "fivetran-events-airflow", *cmd))
        ]
        assert allowed == []
        for cmd in attempts:
            if cmd[0] in DRY_RUN_ONLY:
                continue
            with pytest.raises(redis.exceptions.NoPermissionError):
                af.execute_command(*cmd)
        assert {key: admin.dump(key) for key in keys.values()} == before
        assert admin.ping()

    def test_what_it_may_do(self, server: OwnRedis) -> None:
        """Read the history, keep a waitfrom target (SET NX EX in MULTI), subscribe."""
        server.client().flushdb()
        af = as_user(server, "fivetran-events-airflow", AIRFLOW_PASSWORD)
        history = ConnectorKeys(PREFIX, CONNECTOR)
        af.zrangebyscore(history.ok, 0, "+inf", start=0, num=1, withscores=True)
        af.hget(connectors_key(PREFIX), CONNECTOR)
        pipe = af.pipeline()
        key = wait_from_key(PREFIX, "dag", "run", "task", -1, CONNECTOR)
        pipe.set(key, 5, nx=True, ex=60)
        pipe.get(key)
        assert pipe.execute() == [True, b"5"]
        pubsub = af.pubsub()
        pubsub.psubscribe(f"{PREFIX}changes:*")
        assert pubsub.get_message(timeout=5)["type"] == "psubscribe"
        pubsub.close()
        every = af.pubsub()
        every.psubscribe("*")  # the answer comes with the next read
        with pytest.raises(redis.exceptions.NoPermissionError):
            every.get_message(timeout=5)
        every.close()


class TestTheAppsUser:
    def test_the_webhook_readyz_and_a_worker_forward_through_it(
        self, server: OwnRedis, standin: Airflow2StandIn, tmp_path: Path
    ) -> None:
        """A signed success is recorded and answered, /readyz is ready, and a burst worker
        forwards it to Airflow: nothing the app does needs more than its user."""
        server.client().flushdb()
        settings = Settings(
            redis_url=app_url(server),
            webhook_secrets=[SECRET],
            api_tokens=[TOKEN],
            key_prefix=PREFIX,
            airflow_url=standin.url,
            airflow_username=standin.username,
            airflow_password=SecretStr(standin.password),
        )
        app = create_app(settings)
        with app.test_client() as http:
            assert post_event(http, sync_id="s1")["status"] == "recorded"
            ready = http.get("/readyz")
            assert ready.status_code == 200, ready.json
        exe = Path(sys.executable).parent / "fivetran-events"
        run = subprocess.run(
            [str(exe), "worker", "--burst", "--concurrency", "1"],
            env=worker_env(settings),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        assert "NOPERM" not in run.stderr and "no permissions" not in run.stderr
        assert [(p["dataset_uri"], p["extra"]["sync_id"]) for p in standin.posts] == [(URI, "s1")]
