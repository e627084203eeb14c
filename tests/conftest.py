"""Fixtures: a real redis-server (pytest-redis, free loopback port) and the Flask app."""

from __future__ import annotations

from collections.abc import Iterator

import freezegun
import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from pytest_redis.executor import RedisExecutor

# Sets Airflow's environment (a temporary AIRFLOW_HOME) at import, before any test module
# imports Airflow; it starts nothing.
import testkit.airflow_env  # noqa: F401
from fivetran_events import HistoryReader, HistoryWriter, Settings
from testkit.support import OTHER_SECRET, SECRET, TOKEN

# pytest times each test (--durations) with the clock freezegun moves; left alone, a test
# that ticks a frozen clock by a day reports a day.
freezegun.configure(extend_ignore_list=["_pytest"])


@pytest.fixture
def redis_url(redis_proc: RedisExecutor, redisdb: redis.Redis) -> str:
    """TCP URL of the suite's redis-server; pytest-redis flushes it after each test."""
    return f"redis://{redis_proc.host}:{redis_proc.port}/0"


@pytest.fixture
def settings(redis_url: str) -> Settings:
    # Forwarding on (the web app creates deliveries only then); the web process never
    # calls Airflow, so the URL need not answer. Tests of forwarding off clear it.
    return Settings(
        redis_url=redis_url,
        webhook_secrets=[SECRET, OTHER_SECRET],
        api_tokens=[TOKEN],
        key_prefix="test:",
        airflow_url="http://127.0.0.1:9",
    )


@pytest.fixture
def client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


@pytest.fixture
def writer(client: redis.Redis, settings: Settings) -> HistoryWriter:
    return HistoryWriter(client, settings.key_prefix, settings.retention_ms)


@pytest.fixture
def reader(client: redis.Redis, settings: Settings) -> HistoryReader:
    return HistoryReader(client, settings.key_prefix, settings.max_sync_duration_ms)


@pytest.fixture
def app(settings: Settings) -> Flask:
    from webhook_app import create_app

    return create_app(settings)


@pytest.fixture
def http(app: Flask) -> Iterator[FlaskClient]:
    with app.test_client() as c:
        yield c


#: The files that take a minute or more, longest first. Under pytest-xdist (`make test
#: TEST_WORKERS=N`, with --no-loadscope-reorder) a worker takes whole files in the order
#: below, so these start at once instead of ending the run alone on one worker.
LONG_FILES = (
    "tests/system/airflow_plugin/test_live.py",
    "tests/system/airflow_plugin/test_airflow2.py",
    "tests/system/deploy/test_stack.py",
    "tests/system/airflow_plugin/test_many_deferred.py",
    "tests/system/airflow_plugin/test_redis_outage.py",
    "tests/system/airflow_plugin/test_event_trigger_live.py",
    "tests/system/airflow_plugin/test_sensor_calendars.py",
    "tests/system/webhook_app/test_forward_airflow3.py",
    "tests/system/deploy/test_compose_airflow_role.py",
    "tests/system/airflow_plugin/test_event_trigger_failed_ack.py",
    "tests/system/airflow_plugin/test_astronomer.py",
    "tests/system/airflow_plugin/test_sync_operator.py",
)
#: Then the tiers, slowest first; within a tier, files keep their collection order.
TIERS = ("system", "integration", "unit")
#: Last of all: the api-server outage. It stops and restarts its worker's api-server and
#: floods it with the backlog; beside two other busy Airflows and a CPU-bound process the
#: restarted api-server never caught up, alone (with the same CPU hog) it passes in 2 min.
LAST_FILES = ("tests/system/webhook_app/test_forward_faults.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the files longest first (stable: a file's tests keep their order)."""

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::", 1)[0]
        if path in LONG_FILES:
            return (0, LONG_FILES.index(path))
        if path in LAST_FILES:
            return (2 + len(TIERS), LAST_FILES.index(path))
        tier = path.split("/")[1] if path.count("/") > 1 else ""
        return (1 + (TIERS.index(tier) if tier in TIERS else len(TIERS)), 0)

    items.sort(key=rank)
