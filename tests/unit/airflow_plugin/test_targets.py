"""The target of a run: a pure function of the run, with a defined fallback."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from testkit.support import at


def ctx(**values: Any) -> Any:
    """The parts of a task's context that resolve_target reads."""
    return {"data_interval_end": None, "logical_date": None, "dag_run": None, **values}


def event(extra: dict[str, Any] | None = None, timestamp: datetime | None = None) -> Any:
    """A triggering asset event as the context lists it."""
    return SimpleNamespace(extra=extra or {}, timestamp=timestamp)


class TestResolveTarget:
    def test_explicit_target_wins(self) -> None:
        """target_time (ISO text, naive = UTC) wins over the data interval."""
        from airflow_plugin.targets import resolve_target

        got = resolve_target("2026-01-03T04:05", ctx(data_interval_end=at(9)))
        assert got == (at(3, 4, 5), "target_time")
        assert resolve_target(datetime(2026, 1, 3), ctx())[0] == at(3)

    def test_data_interval_end(self) -> None:
        from airflow_plugin.targets import resolve_target

        assert resolve_target(None, ctx(data_interval_end=at(9))) == (at(9), "data_interval_end")

    def test_asset_triggered_run_uses_the_newest_event_sync_end(self) -> None:
        """No data interval: the newest triggering event's extra.ended_at, else its time."""
        from airflow_plugin.targets import resolve_target

        events = {
            "fivetran://connector/a": [event({"ended_at": "2026-01-04T01:00:00Z"}, at(4, 1, 1))],
            "fivetran://connector/b": [event({}, at(5, 2)), event({"ended_at": "garbage"}, at(3))],
        }
        target, source = resolve_target(
            None, ctx(triggering_asset_events=events, dag_run=SimpleNamespace(run_after=at(9)))
        )
        assert target == at(5, 2) and "triggering asset event" in source

    def test_a_watcher_event_uses_its_payload_ended_at(self) -> None:
        """The event trigger's events carry the extra under ``payload``: same rule."""
        from airflow_plugin.targets import resolve_target

        events = {
            "fivetran://connector/a": [
                event({"payload": {"ended_at": "2026-01-04T01:00:00Z"}}, at(4, 1, 1))
            ],
        }
        target, _ = resolve_target(
            None, ctx(triggering_asset_events=events, dag_run=SimpleNamespace(run_after=at(9)))
        )
        assert target == at(4, 1)

    def test_run_without_interval_or_event_uses_run_after(self) -> None:
        from airflow_plugin.targets import resolve_target

        target, source = resolve_target(
            None, ctx(triggering_asset_events={}, dag_run=SimpleNamespace(run_after=at(9)))
        )
        assert target == at(9) and source.startswith("run_after")

    def test_nothing_to_go_on(self) -> None:
        from airflow_plugin.targets import resolve_target

        with pytest.raises(ValueError, match="pass target_time"):
            resolve_target(None, ctx())

    def test_bad_type(self) -> None:
        from airflow_plugin.targets import resolve_target

        with pytest.raises(TypeError, match="datetime or ISO 8601"):
            resolve_target(12, ctx())


UTC = timezone.utc


class TestPartitionedRuns:
    """A partitioned run (Airflow 3.2+) has a partition key and no data interval: its
    target is the end of its partition, whatever triggered it."""

    @pytest.mark.parametrize(
        ("key", "end"),
        [
            ("2026-01-14T05", at(14, 6)),
            ("2026-01-14", at(15)),
            ("2026-01-12 (W03)", at(19)),
            ("2026-01", at(1, month=2)),
            ("2026-12", at(1, year=2027)),
            ("2026-Q4", at(1, year=2027)),
            ("2026-Q1", at(1, month=4)),
            ("2026", at(1, year=2027)),
        ],
    )
    def test_the_end_of_each_temporal_mappers_period(self, key: str, end: datetime) -> None:
        from airflow_plugin.targets import resolve_target

        events = {"fivetran://connector/a": [event({"ended_at": "2026-03-01T00:00:00Z"})]}
        got = resolve_target(None, ctx(partition_key=key, triggering_asset_events=events))
        assert got == (end, f"the end of partition {key}")

    def test_the_runs_partition_date_is_the_start(self) -> None:
        """A mapper with a timezone: partition_date is the local day's start; its end is
        the next local midnight, 23 hours on when clocks go forward."""
        from zoneinfo import ZoneInfo

        from airflow_plugin.targets import resolve_target

        start = datetime(2026, 3, 29, tzinfo=ZoneInfo("Europe/Berlin"))
        run = SimpleNamespace(partition_key="2026-03-29", partition_date=start)
        target, _ = resolve_target(None, ctx(dag_run=run))
        assert target == datetime(2026, 3, 29, 22, tzinfo=UTC)
        assert target - start == timedelta(hours=23)

    def test_data_interval_and_target_time_still_win(self) -> None:
        from airflow_plugin.targets import resolve_target

        got = resolve_target(None, ctx(partition_key="2026-01-14", data_interval_end=at(9)))
        assert got == (at(9), "data_interval_end")
        assert resolve_target(at(3), ctx(partition_key="2026-01-14"))[0] == at(3)

    def test_a_key_naming_no_period_asks_for_target_time(self) -> None:
        """IdentityMapper passes fivetran-events' key through: a start, no length."""
        from airflow_plugin.targets import resolve_target

        with pytest.raises(ValueError, match="pass target_time"):
            resolve_target(None, ctx(partition_key="2026-01-14T00:00:00"))
