"""``fivetran-events migrate``: refuses strangers, dry-runs, reruns as no-ops, exit codes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from rq import Queue

from fivetran_events import HistoryReader, Settings
from fivetran_events.migration import Migration, Progress, scan_prefix
from fivetran_events.model import Event
from fivetran_events.timeutil import now_ms
from testkit.history_v1 import HOUR_MS, event, history_v1_fixture, write_v1
from testkit.processes import free_port, poll_until, stop_group
from testkit.worker_process import worker_env
from webhook_app.cli import main

pytestmark = pytest.mark.timeout(120)

PREFIX = "test:"


def cli(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, ["migrate", *args], env=env)


def snapshot(client: redis.Redis) -> dict[bytes, Any]:
    """Every key of the database with its serialized value: equal means nothing changed."""
    return {k: client.dump(k) for k in client.scan_iter(count=1000)}


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    return worker_env(settings)


@pytest.fixture
def v1(client: redis.Redis) -> int:
    """A small v1 history (4 connectors x 30 syncs); returns its first event's time."""
    start = now_ms() - 60 * HOUR_MS
    history_v1_fixture(client, PREFIX, 4, 30, start)
    return start


class TestRefusal:
    def test_unknown_keys_refuse_with_2_naming_them_and_change_nothing(
        self, env: dict[str, str], client: redis.Redis, v1: int
    ) -> None:
        """A key of no known layout under the prefix: exit 2, its name, nothing written."""
        client.set(f"{PREFIX}other_app:config", "x")
        client.zadd(f"{PREFIX}c:conn_000:mystery", {"m": 1})
        before = snapshot(client)
        result = cli(env)
        assert result.exit_code == 2, result.output
        line = result.stderr.strip()
        assert len(line.splitlines()) == 1
        assert "test:other_app:config" in line and "test:c:conn_000:mystery" in line
        assert "nothing was changed" in line
        assert snapshot(client) == before

    def test_an_unreadable_v1_member_is_2_and_its_connector_keeps_its_history(
        self, env: dict[str, str], client: redis.Redis, v1: int
    ) -> None:
        client.zadd(f"{PREFIX}c:conn_000:ends", {"{broken": v1})
        keys = sorted(client.scan_iter(match=f"{PREFIX}c:conn_000:*"))
        before = {k: client.dump(k) for k in keys}
        result = cli(env)
        assert result.exit_code == 2, result.output
        (line,) = [x for x in result.stderr.splitlines() if x.startswith("Error:")]
        assert "conn_000" in line and "{broken" in line
        assert {k: client.dump(k) for k in keys} == before
        assert HistoryReader(client, PREFIX, HOUR_MS).syncs("conn_000") == []

    def test_names_at_most_ten(self, env: dict[str, str], client: redis.Redis) -> None:
        for i in range(25):
            client.set(f"{PREFIX}stray:{i}", "x")
        line = cli(env).stderr
        assert line.count("test:stray:") == 10 and "and 15 more" in line

    def test_keys_outside_the_prefix_and_rqs_own_are_not_strangers(
        self, env: dict[str, str], client: redis.Redis, v1: int
    ) -> None:
        """RQ's queue, another deployment's prefix: not ours to judge, not a refusal."""
        Queue("fivetran-events", connection=client).enqueue("builtins.print", "x")
        client.set("other:thing", "x")
        assert cli(env, "--dry-run").exit_code == 0
        assert client.exists("other:thing")


class TestRuns:
    def test_dry_run_reports_and_changes_nothing(
        self, env: dict[str, str], client: redis.Redis, v1: int
    ) -> None:
        before = snapshot(client)
        result = cli(env, "--dry-run", "--json")
        assert result.exit_code == 0, result.output
        body = json.loads(result.stdout)
        assert body["dry_run"] is True and body["connectors"] == 4
        assert body["syncs"] >= 4 * 28  # RESCHEDULED and retries' first ends count too
        assert snapshot(client) == before
        text = cli(env, "--dry-run").stdout
        assert text.startswith("would migrate 4 connector(s)")

    def test_migrates_then_a_rerun_is_a_no_op(
        self, env: dict[str, str], client: redis.Redis, v1: int
    ) -> None:
        """The first run converts and marks the layout; the second changes nothing, exit 0."""
        first = cli(env, "--json")
        assert first.exit_code == 0, first.output
        body = json.loads(first.stdout)
        assert body["connectors"] == 4 and body["events_recorded"] > 0
        assert body["layout"] == "2" and "4/4 connectors" in first.stderr
        assert scan_prefix(client, PREFIX).v1 == {}
        reader = HistoryReader(client, PREFIX, 24 * HOUR_MS)
        assert len(reader.syncs("conn_001", limit=1000)) >= 28
        before = snapshot(client)
        again = cli(env)
        assert again.exit_code == 0, again.output
        assert again.stdout.startswith("nothing to migrate") and "layout marker: 2" in again.stdout
        assert snapshot(client) == before

    def test_an_empty_prefix_is_nothing_to_do(
        self, env: dict[str, str], client: redis.Redis
    ) -> None:
        result = cli(env, "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["nothing_to_do"] is True
        assert snapshot(client) == {}

    def test_a_v1_write_during_the_replay_is_replayed_too(
        self, client: redis.Redis, settings: Settings, v1: int
    ) -> None:
        """A 0.1 webhook still writing v1 (a rolling upgrade) loses nothing: the delete aborts."""
        late_ms = v1 + 50 * HOUR_MS
        replays: list[str] = []

        class RollingUpgrade(Migration):
            def _replay(self, events: Sequence[Event], progress: Progress) -> None:
                super()._replay(events, progress)
                connector = events[0].connector_id
                replays.append(connector)
                if connector == "conn_002" and replays.count(connector) == 1:
                    late = event("sync_end", connector, late_ms, "late-v1", status="SUCCESSFUL")
                    write_v1(client, PREFIX, [late])

        migration = RollingUpgrade(client, PREFIX, settings.retention_ms)
        migration.run(migration.plan())
        assert replays.count("conn_002") == 2 and replays.count("conn_001") == 1
        assert scan_prefix(client, PREFIX).v1 == {}
        listed = HistoryReader(client, PREFIX, 24 * HOUR_MS).syncs(
            "conn_002", since_ms=late_ms, until_ms=late_ms
        )
        assert [s["sync_id"] for s in listed] == ["late-v1"]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.mark.slow
def test_workers_end_when_the_migration_is_killed_alone(
    env: dict[str, str], client: redis.Redis, tmp_path: Path
) -> None:
    """SIGKILL to the migrating process only: its workers stop by themselves; a rerun ends it."""
    history_v1_fixture(client, PREFIX, 8, 1000, now_ms() - 1100 * HOUR_MS)
    err = tmp_path / "err"
    proc = subprocess.Popen(
        [sys.executable, "-m", "webhook_app", "migrate", "--jobs", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=err.open("wb"),
        start_new_session=True,
    )
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        workers = poll_until(
            lambda: (
                [int(p) for p in children.read_text().split()]
                if len(children.read_text().split()) >= 2
                and client.scard(f"{PREFIX}migrate:done") >= 1
                else None
            ),
            "two workers and a first connector done",
            timeout=60,
            details=err.read_text,
        )
        assert client.scard(f"{PREFIX}migrate:done") < 8, "it ended before the kill"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        poll_until(lambda: not any(alive(w) for w in workers), "the orphaned workers to end", 15)
    finally:
        stop_group(proc, timeout=5, sig=signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):  # its workers, should they outlive it
            os.killpg(proc.pid, signal.SIGKILL)
    again = cli(env, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["resumed_connectors"] >= 1
    assert scan_prefix(client, PREFIX).v1 == {}


class TestExitCodes:
    @pytest.mark.parametrize("args", [["--bogus"], ["--json", "extra"]])
    def test_bad_arguments_are_2_in_one_line(self, env: dict[str, str], args: list[str]) -> None:
        result = cli(env, *args)
        assert result.exit_code == 2, result.output
        assert len(result.stderr.strip().splitlines()) == 1

    def test_unreachable_redis_is_4(self, env: dict[str, str]) -> None:
        env = {**env, "FIVETRAN_EVENTS_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
        result = cli(env)
        assert result.exit_code == 4, result.output
        assert "cannot reach Redis" in result.stderr
