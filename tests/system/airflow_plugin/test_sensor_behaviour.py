"""The sensor's target per timetable, its flags, restarts and its FAIL message (dag.test())."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from testkit.support import at, deliver

from .dagtest import daily_syncs, one_sensor_dag, result, run, sync, z

# Short reschedule intervals keep dag.test() fast; the scheduler race they warn of
# does not exist in dag.test(), which runs every poke in this process.
pytestmark = pytest.mark.filterwarnings("ignore:.*apache/airflow#71172:UserWarning")


class TestTimetables:
    """The default target is the run's data_interval_end under every kind of timetable."""

    @pytest.mark.parametrize(
        ("kind", "target", "decider"),
        [
            ("cron_data_interval", at(5), "ok-5"),
            ("cron_trigger", at(5), "ok-5"),
            ("timedelta", at(5), "ok-5"),
            ("events", at(5, 12), "ok-6"),
            ("custom", at(5, 6), "ok-5"),
        ],
    )
    def test_target_is_data_interval_end(
        self,
        dagtest_airflow: Path,
        http: FlaskClient,
        monkeypatch: pytest.MonkeyPatch,
        kind: str,
        target: datetime,
        decider: str,
    ) -> None:
        from airflow import plugins_manager
        from airflow.sdk import CronDataIntervalTimetable, CronTriggerTimetable

        # airflow.sdk.EventsTimetable fails to serialize on 3.3.2 (KeyError '_summary');
        # the core class is what the scheduler runs anyway.
        from airflow.timetables.events import EventsTimetable

        from .timetables import SixAmTimetable

        registered = plugins_manager.get_timetables_plugins
        monkeypatch.setattr(
            plugins_manager,
            "get_timetables_plugins",
            lambda: {
                **registered(),
                # Registered under its import path, so a move of the module follows.
                f"{SixAmTimetable.__module__}.{SixAmTimetable.__qualname__}": SixAmTimetable,
            },
        )
        schedule = {
            "cron_data_interval": CronDataIntervalTimetable("@daily", timezone="UTC"),
            "cron_trigger": CronTriggerTimetable("@daily", timezone="UTC"),
            "timedelta": timedelta(days=1),
            "events": EventsTimetable(event_dates=[at(5, 12)]),  # type: ignore[list-item]
            "custom": SixAmTimetable(),
        }[kind]
        daily_syncs(http)
        logical = at(5, 12) if kind in ("events", "custom") else at(5)
        out = run(one_sensor_dag(f"tt_{kind}", schedule), logical)
        assert out["_run"].data_interval_end == target
        assert result(out) == ("success", z(target), decider)

    def test_run_without_data_interval_uses_run_after(
        self, dagtest_airflow: Path, http: FlaskClient
    ) -> None:
        """A run with no data interval (as asset-triggered and manual runs in Airflow 3)."""
        daily_syncs(http)
        dag = one_sensor_dag("tt_none", None)
        out = run(dag, None, run_after=at(7, 12))
        assert out["_run"].data_interval_end is None
        assert result(out) == ("success", z(at(7, 12)), "ok-8")

    def test_explicit_target_time_template(self, dagtest_airflow: Path, http: FlaskClient) -> None:
        """target_time is templated; a rendered ISO string is read as UTC."""
        daily_syncs(http)
        dag = one_sensor_dag(
            "tt_explicit",
            "@daily",
            target_time="{{ (data_interval_end - macros.timedelta(hours=20))"
            ".strftime('%Y-%m-%dT%H:%M:%S') }}",
        )
        out = run(dag, at(5))
        assert result(out) == ("success", z(at(4, 4)), "ok-4")


class TestRestart:
    def test_rerun_waits_for_the_same_target(
        self, dagtest_airflow: Path, http: FlaskClient
    ) -> None:
        """A re-run sees the same target: a sync before it never counts, one after it does."""
        daily_syncs(http, range(1, 11))
        dag = one_sensor_dag("restart", "@daily", propagate_failures_forward=False)
        assert result(run(dag, at(12)))[0] == "skipped"  # WAIT: nothing at or after Jan 12
        sync(http, "c1", at(11, 6), sync_id="late-but-before")  # arrives now, ended before
        assert result(run(dag, at(12)))[0] == "skipped"
        sync(http, "c1", at(12, 6), sync_id="after")  # a sync that counts arrives
        assert result(run(dag, at(12))) == ("success", z(at(12)), "after")


class TestFlags:
    def test_always_wait_when_syncing(self, dagtest_airflow: Path, http: FlaskClient) -> None:
        """A running sync holds the sensor even though a success already counts."""
        from datetime import timezone

        daily_syncs(http)
        from testkit.support import payload

        deliver(http, payload("sync_start", "c1", datetime.now(timezone.utc), sync_id="running"))
        waits = one_sensor_dag("aw_on", "@daily", always_wait_when_syncing=True)
        passes = one_sensor_dag("aw_off", "@daily")
        assert result(run(waits, at(5)))[0] == "skipped"
        assert result(run(passes, at(5)))[:2] == ("success", z(at(5)))

    def test_stale_running_sync_does_not_wait_forever(
        self, dagtest_airflow: Path, http: FlaskClient
    ) -> None:
        """A sync_start older than the maximum sync duration (24 h) is not running."""
        from datetime import timezone

        from testkit.support import payload

        daily_syncs(http)
        started = datetime.now(timezone.utc) - timedelta(hours=25)
        deliver(http, payload("sync_start", "c1", started, sync_id="lost"))
        dag = one_sensor_dag("aw_stale", "@daily", always_wait_when_syncing=True)
        assert result(run(dag, at(5)))[:2] == ("success", z(at(5)))

    def test_started_after_refuses_a_sync_that_started_before(
        self, dagtest_airflow: Path, http: FlaskClient
    ) -> None:
        """criterion=started_after: the success must have started at or after the target."""
        sync(http, "c1", at(10, 1), sync_id="straddles", started=at(9, 23))
        strict = one_sensor_dag("sa_strict", "@daily", criterion="started_after")
        loose = one_sensor_dag("sa_loose", "@daily")
        assert result(run(strict, at(10)))[0] == "skipped"
        assert result(run(loose, at(10))) == ("success", z(at(10)), "straddles")
        sync(http, "c1", at(10, 3), sync_id="inside", started=at(10, 2))
        assert result(run(strict, at(10))) == ("success", z(at(10)), "inside")

    @pytest.mark.parametrize("mode", ["poke", "reschedule", "deferrable"])
    def test_flags_reach_every_mode(
        self, dagtest_airflow: Path, http: FlaskClient, mode: str
    ) -> None:
        """always_wait_when_syncing and started_after hold in poke, reschedule, deferrable."""
        from datetime import timezone

        from testkit.support import payload

        sync(http, "c1", at(10, 1), sync_id="straddles", started=at(9, 23))
        deliver(http, payload("sync_start", "c1", datetime.now(timezone.utc), sync_id="running"))
        kw = {
            "mode": "reschedule" if mode == "reschedule" else "poke",
            "deferrable": mode == "deferrable",
        }
        # In deferrable mode a WAIT would defer, and dag.test() never times a deferral out,
        # so deferrable runs here only check outcomes decided before deferring.
        if mode != "deferrable":
            assert (
                result(
                    run(
                        one_sensor_dag(
                            f"fm_aw_{mode}", "@daily", always_wait_when_syncing=True, **kw
                        ),
                        at(5),
                    )
                )[0]
                == "skipped"
            )
            assert (
                result(
                    run(
                        one_sensor_dag(f"fm_sa_{mode}", "@daily", criterion="started_after", **kw),
                        at(10),
                    )
                )[0]
                == "skipped"
            )
        assert (
            result(run(one_sensor_dag(f"fm_ok_{mode}", "@daily", **kw), at(10)))[2] == "straddles"
        )


class TestRescheduleInterval:
    def test_short_reschedule_interval_warns_at_parse_time(self) -> None:
        """Reschedule mode below 15 s warns (the DAG processor shows it as a DAG warning)."""
        import warnings

        from airflow_plugin.sensors import FivetranDateTimeSensor

        with pytest.warns(UserWarning, match="apache/airflow#71172"):
            FivetranDateTimeSensor(
                task_id="fast", connector_id="c", mode="reschedule", poke_interval=5
            )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            kws: tuple[dict[str, Any], ...] = (
                {"mode": "reschedule", "poke_interval": 15},
                {"mode": "poke", "poke_interval": 1},
                {"mode": "reschedule", "poke_interval": 1, "deferrable": True},
            )
            for kw in kws:
                FivetranDateTimeSensor(task_id="ok", connector_id="c", **kw)


class TestFailMessage:
    def test_fail_names_sync_time_reason_and_target(
        self, dagtest_airflow: Path, http: FlaskClient
    ) -> None:
        """FAIL raises FivetranSyncFailed naming the failed sync, its time, reason, target."""
        from airflow_plugin.exceptions import FivetranSyncFailed
        from airflow_plugin.sensors import FivetranDateTimeSensor

        sync(
            http,
            "c1",
            at(12, 6),
            "FAILURE_WITH_TASK",
            sync_id="f-12",
            reason="quota exceeded",
            taskType="reconnect",
        )
        sensor = FivetranDateTimeSensor(task_id="s", connector_id="c1")
        with pytest.raises(FivetranSyncFailed) as err:
            sensor.poke({"data_interval_end": at(11)})  # type: ignore[typeddict-item]
        msg = str(err.value)
        for part in (
            "c1",
            "f-12",
            "2026-01-12T06:00:00.000Z",
            "quota exceeded",
            "FAILURE_WITH_TASK",
            "2026-01-11T00:00:00.000Z",
        ):
            assert part in msg, (part, msg)
        assert isinstance(err.value, Exception)


class TestLifecycle:
    """A paused or deleted connector: the sensor does not wait for what cannot come."""

    @pytest.mark.parametrize("mode", ["poke", "reschedule", "deferrable"])
    @pytest.mark.parametrize("event", ["pause_connector", "delete_connection"])
    def test_stopped_connector_fails_unless_wait_when_paused(
        self, dagtest_airflow: Path, http: FlaskClient, mode: str, event: str
    ) -> None:
        """Nothing counts after the target and the connector was paused (or deleted): FAIL
        naming it, in every mode; with wait_when_paused, WAIT (skipped at the timeout)."""
        from testkit.support import payload

        daily_syncs(http, range(1, 6))
        deliver(http, payload(event, "c1", at(5, 12)))
        kw = {"mode": "reschedule" if mode == "reschedule" else "poke"}
        kw["deferrable"] = mode == "deferrable"  # type: ignore[assignment]
        assert result(run(one_sensor_dag(f"lc_ok_{mode}", "@daily", **kw), at(5)))[0] == "success"
        out = run(one_sensor_dag(f"lc_fail_{mode}", "@daily", **kw), at(8))
        assert out["s"][0] == "failed"
        if mode != "deferrable":  # a deferred WAIT would hang dag.test(), see above
            waits = one_sensor_dag(f"lc_wait_{mode}", "@daily", wait_when_paused=True, **kw)
            assert result(run(waits, at(8)))[0] == "skipped"

    def test_fail_message_names_the_pause_and_its_time(
        self, dagtest_airflow: Path, http: FlaskClient
    ) -> None:
        from airflow_plugin.exceptions import FivetranSyncFailed
        from airflow_plugin.sensors import FivetranDateTimeSensor
        from testkit.support import payload

        daily_syncs(http, range(1, 3))
        deliver(http, payload("pause_connector", "c1", at(2, 12)))
        sensor = FivetranDateTimeSensor(task_id="s", connector_id="c1")
        with pytest.raises(FivetranSyncFailed, match=r"paused at 2026-01-02T12:00:00\.000Z"):
            sensor.poke({"data_interval_end": at(4)})  # type: ignore[typeddict-item]
        # A sync that starts after the pause means the connector is back.
        deliver(http, payload("sync_start", "c1", at(3), sync_id="back"))
        assert not sensor.poke({"data_interval_end": at(4)}).is_done  # type: ignore[typeddict-item]

    def test_fail_when_overdue_after_names_how_late(
        self, dagtest_airflow: Path, http: FlaskClient, client: redis.Redis
    ) -> None:
        """Daily, last success Jan 2 06:00, due Jan 3 12:00: a wait for Jan 4 fails when
        the connector is over an hour late (it is by months), and waits without it."""
        from airflow_plugin.exceptions import FivetranSyncFailed
        from airflow_plugin.sensors import FivetranDateTimeSensor
        from fivetran_events.freshness import Schedule
        from fivetran_events.history.writer import record_schedules

        daily_syncs(http, range(1, 3))
        record_schedules(
            client, "test:", {"c1": Schedule(sync_frequency=1440, schedule_type="auto")}
        )
        late = FivetranDateTimeSensor(task_id="s", connector_id="c1", fail_when_overdue_after=3600)
        with pytest.raises(
            FivetranSyncFailed, match=r"overdue by \d+h\d\dm \(due at 2026-01-03T12:00"
        ):
            late.poke({"data_interval_end": at(4)})  # type: ignore[typeddict-item]
        patient = FivetranDateTimeSensor(task_id="s2", connector_id="c1")
        assert not patient.poke({"data_interval_end": at(4)}).is_done  # type: ignore[typeddict-item]


class TestRescheduled:
    def test_next_look_is_at_rescheduled_at(self, dagtest_airflow: Path, http: FlaskClient) -> None:
        """A RESCHEDULED latest end: WAIT naming rescheduledAt, and the next poke is then,
        not after the poke interval (capped by the time left before the timeout)."""
        from datetime import timezone

        from airflow_plugin.sensors import FivetranDateTimeSensor

        now = datetime.now(timezone.utc)
        again = now + timedelta(minutes=30)
        sync(
            http,
            "c1",
            now - timedelta(minutes=1),
            "RESCHEDULED",
            sync_id="r1",
            reason="the source's API quota",
            rescheduledAt=z(again),
        )
        sensor = FivetranDateTimeSensor(
            task_id="s", connector_id="c1", mode="reschedule", poke_interval=60, timeout=7200
        )
        ret = sensor.poke({"data_interval_end": now - timedelta(hours=1)})  # type: ignore[typeddict-item]
        assert not ret.is_done
        wait = sensor._get_next_poke_interval(now, lambda: 0.0, 1)
        assert 30 * 60 - 10 < wait <= 30 * 60
        short = FivetranDateTimeSensor(
            task_id="t", connector_id="c1", mode="reschedule", poke_interval=60, timeout=600
        )
        short.poke({"data_interval_end": now - timedelta(hours=1)})  # type: ignore[typeddict-item]
        assert short._get_next_poke_interval(now, lambda: 100.0, 1) == 501.0
        # Once a completion comes after it, the interval is the poke interval again.
        sync(http, "c1", now, "FAILURE", sync_id="f1")
        sensor.propagate_failures_forward = False
        ret = sensor.poke({"data_interval_end": now + timedelta(hours=1)})  # type: ignore[typeddict-item]
        assert not ret.is_done
        assert sensor._get_next_poke_interval(now, lambda: 0.0, 1) == 60
