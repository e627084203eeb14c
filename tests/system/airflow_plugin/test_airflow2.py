"""The plugin on a real Airflow 2.11: sensor calendars, deferral, operator, asset, plugin.

``airflow_plugin/compat.py`` claims Airflow 2.10+; these tests hold it to that. Airflow
2.11 lives in its own venv (testkit/airflow2_harness.py, with this checkout installed
there), so each test runs tests/system/airflow_plugin/airflow2_dagtest.py in it as a
subprocess: its own AIRFLOW_HOME in a temporary folder, SQLite, ``airflow db migrate``
once per module, the connection ``fivetran_events_redis`` pointing at the suite's
redis-server. History is written here, through the webhook, as Fivetran delivers it;
the subprocess runs ``dag.test()`` and reports each run's task states, return values
and failure messages as JSON.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from fivetran_events import Settings
from testkit.airflow2_harness import REPO, airflow2_env, ensure_airflow2
from testkit.calendars import (
    CALENDARS,
    SCENARIO_A,
    SCENARIO_B,
    F,
    S,
    W,
)
from testkit.own_postgres import OwnPostgres, own_postgres
from testkit.support import at, conn_uri, pattern_listener_ids

from .dagtest import sync

# The first run of a machine installs Airflow 2.11 (bounded by the harness's own timeout);
# once the venv exists the module takes well under three minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SCRIPT = Path(__file__).with_name("airflow2_dagtest.py")
VARIANTS = {
    "a_prop": ("A", True),
    "a_noprop": ("A", False),
    "b_prop": ("B", True),
    "b_noprop": ("B", False),
}
#: Seconds a part may take (dag.test() never times a deferral out: this bounds it).
PART_TIMEOUT = 240.0


class Airflow2Home:
    """A migrated Airflow 2.11 home and how to run Airflow 2 commands against it."""

    def __init__(self, root: Path, db: OwnPostgres) -> None:
        self.root = root
        self.db = db
        self.exe = ensure_airflow2()
        self.python = self.exe.parent / "python"
        (root / "dags").mkdir(parents=True, exist_ok=True)

    def env(self, redis_conn: str | None = None) -> dict[str, str]:
        # Unbuffered: a running part's log is read while it runs.
        extra = {"AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO", "PYTHONUNBUFFERED": "1"}
        if redis_conn is not None:
            extra["AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS"] = redis_conn
        return airflow2_env(self.root, self.exe, self.db, extra)

    def log_tail(self, name: str) -> str:
        path = self.root / name
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def command(self, *args: str, redis_conn: str | None = None, timeout: float = 300) -> str:
        """Run ``airflow ARGS``; return its stdout (its stderr goes to a log file)."""
        with open(self.root / "commands.log", "ab") as log:
            done = subprocess.run(
                [str(self.exe), *args],
                env=self.env(redis_conn),
                stdout=subprocess.PIPE,
                stderr=log,
                timeout=timeout,
                check=False,
            )
        assert done.returncode == 0, (args, self.log_tail("commands.log"))
        return done.stdout.decode()

    def start(
        self, part: str, redis_conn: str, progress: Path | None = None
    ) -> tuple[subprocess.Popen[bytes], Path]:
        out = self.root / f"{part}.json"
        out.unlink(missing_ok=True)
        log = open(self.root / f"{part}.log", "wb")  # noqa: SIM115 (the child keeps it)
        args = [str(self.python), str(SCRIPT), part, str(out)]
        if progress is not None:
            args.append(str(progress))
        proc = subprocess.Popen(
            args,
            env=self.env(redis_conn),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        return proc, out

    def finish(
        self, part: str, proc: subprocess.Popen[bytes], out: Path, timeout: float = PART_TIMEOUT
    ) -> dict[str, Any]:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"{part} did not finish in {timeout:g}s:\n{self.log_tail(part + '.log')}")
        assert proc.returncode == 0 and out.exists(), self.log_tail(f"{part}.log")
        result: dict[str, Any] = json.loads(out.read_text())
        assert "crash" not in result, result["crash"] + "\n" + self.log_tail(f"{part}.log")
        return result

    def run(self, part: str, redis_conn: str) -> dict[str, Any]:
        return self.finish(part, *self.start(part, redis_conn))


@pytest.fixture(scope="module")
def airflow2_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow2Home]:
    """Airflow 2.11 with this checkout installed, and a freshly migrated home whose
    metadata is in a PostgreSQL of its own, stopped after the module."""
    with own_postgres() as db:
        home = Airflow2Home(tmp_path_factory.mktemp("airflow2-home"), db)
        home.command("db", "migrate")
        yield home


@pytest.fixture
def airflow2_conn(redis_url: str, settings: Settings) -> str:
    """``AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS`` for the suite's Redis and the app's prefix."""
    return conn_uri(redis_url, settings.key_prefix)


def outcome(task: dict[str, Any]) -> str:
    return {"success": S, "failed": F, "skipped": W}[task["state"]]


class TestSensorCalendarsOnAirflow2:
    def test_poke_mode_gives_the_seed_calendars(
        self, airflow2_home: Airflow2Home, airflow2_conn: str, http: FlaskClient
    ) -> None:
        """schedule="@daily" on 2.11: every January run ends as the seed says.

        A FAIL fails the task with a message naming the failed sync; a WAIT times out
        and soft_fail skips it; a SUCCESS returns the deciding sync for the run's target.
        """
        for variant, (scenario, _) in VARIANTS.items():
            for day in range(1, 16):
                for sid, ended, status in SCENARIO_A if scenario == "A" else SCENARIO_B:
                    sync(http, f"{variant}_{day}", ended, status, sync_id=sid)
        result = airflow2_home.run("calendar", airflow2_conn)

        assert result["timetable"] == "CronDataIntervalTimetable"
        for variant, key in VARIANTS.items():
            runs = result[variant]
            got = {
                day: outcome(runs[str(day)]["tasks"]["wait_for_fivetran"]) for day in range(1, 16)
            }
            assert got == CALENDARS[key], variant
            for day in range(1, 16):
                run = runs[str(day)]
                assert run["data_interval_end"] == at(day).isoformat()
                task = run["tasks"]["wait_for_fivetran"]
                if got[day] == S:
                    assert task["value"]["sync_id"] == ("a-ok" if key[0] == "A" else "b-ok")
                    assert task["value"]["target"] == f"2026-01-{day:02d}T00:00:00.000Z"
                elif got[day] == F:
                    assert "a-fail" in run["error"], run
                    assert f"not synced as of 2026-01-{day:02d}" in run["error"]
                else:
                    assert "error" not in run and task["value"] is None


class TestDeferrableOnAirflow2:
    def test_a_sync_recorded_while_deferred_releases_the_sensor(
        self,
        airflow2_home: Airflow2Home,
        airflow2_conn: str,
        http: FlaskClient,
        app: Flask,
        client: redis.Redis,
    ) -> None:
        """dag.test() on 2.11 runs the trigger in line; the webhook's publish decides it.

        d_now succeeds before deferring. d_ok and d_fail defer (their only success is
        before the target); once each trigger has subscribed, a success (resp. a
        failure) is recorded through the webhook, and the trigger's decision finishes
        the task: success with that sync, or a failure naming it.
        """
        sync(http, "d_now", at(5, 6), sync_id="now-ok")
        sync(http, "d_ok", at(10, 6), sync_id="old-ok")
        sync(http, "d_fail", at(10, 6), sync_id="old-ok")
        releases: dict[str, tuple[str, str, dict[str, Any]]] = {
            "d_ok": ("SUCCESSFUL", "release-ok", {}),
            "d_fail": ("FAILURE", "release-fail", {"reason": "quota exceeded"}),
        }

        progress = airflow2_home.root / "deferrable.progress"
        progress.write_text("")
        # Subscriptions seen so far: a released run's listener may close late (its
        # in-line loop ends after the task), so the next trigger is known to listen by a
        # subscription of a new client id, not by the count going up again.
        old = pattern_listener_ids(client)
        proc, out = airflow2_home.start("deferrable", airflow2_conn, progress)
        part_log = airflow2_home.root / "deferrable.log"
        released: list[str] = []
        deadline = time.monotonic() + PART_TIMEOUT
        while proc.poll() is None and time.monotonic() < deadline:
            listeners = pattern_listener_ids(client)
            announced = [line.split()[1] for line in progress.read_text().splitlines()]
            pending = [c for c in announced if c not in released]
            # A new pattern subscription means the trigger of the run announced last is
            # listening: the sensor deferred. Its first read may still be under way, and a
            # sync recorded before that read decides it on "the first check"; its logged
            # first wait says the read is done, so the release comes as a change message.
            log_text = part_log.read_text(errors="replace")
            if pending and listeners - old and f"connector {pending[0]} waits:" in log_text:
                status, sid, data = releases[pending[0]]
                sync(http, pending[0], at(20), status, sync_id=sid, **data)
                released.append(pending[0])
                old |= listeners
            time.sleep(0.05)
        result = airflow2_home.finish(
            "deferrable", proc, out, max(1.0, deadline - time.monotonic())
        )

        assert released == ["d_ok", "d_fail"]
        now = result["d_now"]["tasks"]["wait_for_fivetran"]
        assert now["state"] == "success" and now["value"]["sync_id"] == "now-ok"
        ok = result["d_ok"]["tasks"]["wait_for_fivetran"]
        assert ok["state"] == "success", result["d_ok"]
        assert ok["value"]["sync_id"] == "release-ok"
        assert ok["value"]["target"] == "2026-01-12T00:00:00.000Z"
        failed = result["d_fail"]
        assert failed["tasks"]["wait_for_fivetran"]["state"] == "failed", failed
        assert "release-fail" in failed["error"] and "quota exceeded" in failed["error"]
        log = part_log.read_text(errors="replace")
        assert "decided success on a change message" in log
        assert "decided fail on a change message" in log


class TestOperatorAssetPluginOnAirflow2:
    def test_short_circuit_asset_trigger_and_macros(
        self, airflow2_home: Airflow2Home, airflow2_conn: str, http: FlaskClient
    ) -> None:
        """The short-circuit skips when a success counts; connector_asset is a Dataset;
        the trigger round-trips its serialization; the plugin's macros render."""
        sync(http, "sc", at(5, 6), sync_id="sc-5")
        result = airflow2_home.run("misc", airflow2_conn)

        assert result["airflow_v_3"] is False
        assert Path(result["plugin_file"]).resolve().is_relative_to(REPO.resolve())
        synced, unsynced = result["short_circuit"]["5"], result["short_circuit"]["7"]
        assert synced["tasks"]["needs_sync"]["state"] == "success"
        assert synced["tasks"]["fivetran_sync"]["state"] == "skipped"
        assert unsynced["tasks"]["needs_sync"]["state"] == "success"
        assert unsynced["tasks"]["fivetran_sync"]["state"] == "success"
        assert result["asset"] == {
            "is_dataset": True,
            "uri": "fivetran://connector/sc",
            "templated": "fivetran://w/sc",
            "timetable": "DatasetTriggeredTimetable",
        }
        assert result["trigger_roundtrip"] is True
        assert result["plugins"].get("fivetran_events") == "airflow_plugin.plugin"
        assert result["plugin_import_errors"] == {}
        rendered = result["macros"]["tasks"]["render"]
        assert rendered["state"] == "success", result["macros"]
        assert rendered["value"] == {"uri": "fivetran://connector/sc", "last": "sc-5"}

    def test_the_plugin_registers_through_its_entry_point(
        self, airflow2_home: Airflow2Home
    ) -> None:
        """``airflow plugins`` on 2.11 lists it, loaded from the airflow.plugins entry point."""
        listed = json.loads(airflow2_home.command("plugins", "--output", "json"))
        ours = [p for p in listed if p.get("name") == "fivetran_events"]
        assert len(ours) == 1, listed
        assert ours[0]["macros"] == [
            "airflow_plugin.plugin.last_successful_sync",
            "airflow_plugin.plugin.asset_uri",
        ]
        source = ours[0]["source"]
        assert source.startswith("fivetran-events==") and "group='airflow.plugins'" in source
        assert "airflow_plugin.plugin:FivetranEventsPlugin" in source, source
