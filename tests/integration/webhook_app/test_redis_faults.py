"""A real Redis that refuses writes: the webhook answers 503 (Fivetran retries), never 500.

Each state is a real redis-server of the test's own driven into it: out of memory
(noeviction), a read-only replica, a failed background save (MISCONF), a busy Lua
script (BUSY) and a data set still loading (LOADING). In each the delivery is refused
with 503 and ``Retry-After``, counted as ``unavailable``, writes nothing, and /readyz
says not ready without naming Redis's address; once Redis recovers the same delivery
is recorded.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
import redis

from fivetran_events import Settings
from fivetran_events.keys import readiness_key
from testkit.own_redis import OwnRedis, delivery_count, own_redis
from testkit.processes import poll_until
from testkit.support import at, payload, signed
from webhook_app import create_app

#: A state's context yields the server in that state and a function that ends the state.
Fault = Callable[[Path], AbstractContextManager[tuple[OwnRedis, Callable[[], None]]]]


def refuses(client: redis.Redis, error: type[Exception]) -> bool:
    try:
        client.set("probe", "1")
    except error:
        return True
    return False


@contextmanager
def out_of_memory(tmp: Path) -> Iterator[tuple[OwnRedis, Callable[[], None]]]:
    with own_redis(tmp / "oom", "--maxmemory-policy", "noeviction") as server:
        c = server.client()
        c.config_set("maxmemory", 1)

        def recover() -> None:
            c.config_set("maxmemory", 0)

        yield server, recover


@contextmanager
def read_only_replica(tmp: Path) -> Iterator[tuple[OwnRedis, Callable[[], None]]]:
    """A failover left the app pointing at a server that is now a replica."""
    with own_redis(tmp / "primary") as primary, own_redis(tmp / "replica") as server:
        c = server.client()
        c.replicaof("127.0.0.1", str(primary.port))
        poll_until(lambda: refuses(c, redis.ReadOnlyError), "READONLY", 20, 0.05)

        def recover() -> None:
            c.replicaof("NO", "ONE")

        yield server, recover


@contextmanager
def failed_save(tmp: Path) -> Iterator[tuple[OwnRedis, Callable[[], None]]]:
    """A BGSAVE into a directory that vanished: Redis stops writes (MISCONF)."""
    gone = tmp / "gone"
    with own_redis(
        tmp / "misconf",
        "--stop-writes-on-bgsave-error",
        "yes",
        "--enable-protected-configs",
        "local",
    ) as server:
        c = server.client()
        c.config_set("save", "3600 1")
        gone.mkdir()
        c.config_set("dir", str(gone))
        shutil.rmtree(gone)  # removed under it, so even root cannot save there
        c.bgsave()
        poll_until(
            lambda: c.info("persistence")["rdb_last_bgsave_status"] == "err",
            "a failed save",
            20,
            0.05,
        )

        def recover() -> None:
            c.config_set("dir", str(server.directory))
            c.bgsave()
            poll_until(
                lambda: c.info("persistence")["rdb_last_bgsave_status"] == "ok", "a save", 20, 0.05
            )

        yield server, recover


@contextmanager
def busy_script(tmp: Path) -> Iterator[tuple[OwnRedis, Callable[[], None]]]:
    """A Lua script that never ends: Redis answers BUSY to everything but SCRIPT KILL."""
    with own_redis(tmp / "busy", "--busy-reply-threshold", "100") as server:
        runner = server.client(socket_timeout=None)
        errors: list[Exception] = []

        def run() -> None:
            try:
                runner.eval("while true do end", 0)
            except redis.ResponseError as exc:  # "Script killed by user"
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        c = server.client()
        poll_until(lambda: refuses(c, redis.ResponseError), "BUSY", 20, 0.05)

        def recover() -> None:
            c.script_kill()
            thread.join(10)
            assert errors and not thread.is_alive()

        yield server, recover


@contextmanager
def loading(tmp: Path) -> Iterator[tuple[OwnRedis, Callable[[], None]]]:
    """A restarted Redis still loading a large RDB (slowed per key so the test sees it)."""
    directory = tmp / "loading"
    with own_redis(directory) as filler:
        c = filler.client()
        with c.pipeline(transaction=False) as pipe:
            for i in range(0, 60_000, 1000):
                pipe.mset({f"fill:{j}": "x" * 16 for j in range(i, i + 1000)})
            pipe.execute()
        c.save()
    # 60,000 keys x 1 ms: a minute of LOADING at most; recover() lifts the delay.
    with own_redis(
        directory, "--key-load-delay", "1000", "--loading-process-events-interval-bytes", "1024"
    ) as server:
        c = server.client(retry=None)
        poll_until(lambda: refuses(c, redis.BusyLoadingError), "LOADING", 20, 0.05)

        def recover() -> None:
            c.config_set("key-load-delay", 0)
            poll_until(
                lambda: not refuses(c, redis.BusyLoadingError), "the end of LOADING", 20, 0.05
            )

        yield server, recover


STATES: dict[str, Fault] = {
    "OOM": out_of_memory,
    "READONLY": read_only_replica,
    "MISCONF": failed_save,
    "BUSY": busy_script,
    "LOADING": loading,
}


@pytest.mark.parametrize("state", list(STATES))
def test_refused_write_is_503_and_not_ready(settings: Settings, tmp_path: Path, state: str) -> None:
    """Redis refusing writes answers 503 with Retry-After, writes nothing, and /readyz
    is not ready (a write probe, not PING); after recovery the delivery is recorded."""
    body = payload(sync_id="s-fault", created=at(3))
    raw, headers = signed(body)
    with STATES[state](tmp_path) as (server, recover):
        app = create_app(
            settings.model_copy(update={"redis_url": server.url, "redis_timeout_seconds": 2.0})
        )
        http = app.test_client()
        before = delivery_count(http.get("/metrics").get_data(as_text=True), "unavailable")
        r = http.post("/webhooks/fivetran", data=raw, headers=headers)
        assert r.status_code == 503, (state, r.status_code, r.data)
        assert r.headers["Retry-After"] == str(settings.retry_after_seconds)
        assert r.is_json and (r.json or {})["status"] == "error"
        after = delivery_count(http.get("/metrics").get_data(as_text=True), "unavailable")
        assert after == before + 1
        ready = http.get("/readyz")
        assert ready.status_code == 503, (state, ready.data)
        assert ready.headers["Retry-After"] == str(settings.retry_after_seconds)
        assert str(server.port) not in ready.get_data(as_text=True)
        assert http.get("/healthz").status_code == 200

        recover()
        c = server.client()
        probe = readiness_key("test:").encode()
        assert [k for k in c.keys("test:*") if k != probe] == []
        assert http.get("/readyz").status_code == 200
        r = http.post("/webhooks/fivetran", data=raw, headers=headers)
        assert r.status_code == 200 and (r.json or {})["status"] == "recorded", r.data
        assert c.zcard("test:h:assimilate_seem:ok") == 1


@pytest.mark.parametrize("policy", ["volatile-lru", "allkeys-lru"])
def test_an_evicting_redis_is_not_ready(settings: Settings, tmp_path: Path, policy: str) -> None:
    """A Redis that may evict keys (managed offerings often default to volatile-lru) takes
    writes, but /readyz answers 503 naming maxmemory-policy until it is noeviction."""
    with own_redis(tmp_path / policy, "--maxmemory-policy", policy) as server:
        http = create_app(settings.model_copy(update={"redis_url": server.url})).test_client()
        ready = http.get("/readyz")
        assert ready.status_code == 503, ready.data
        said = (ready.json or {})["error"]
        assert "maxmemory-policy" in said and policy in said and "noeviction" in said, said
        assert ready.headers["Retry-After"] == str(settings.retry_after_seconds)
        server.client().config_set("maxmemory-policy", "noeviction")
        assert http.get("/readyz").status_code == 200
