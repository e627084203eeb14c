"""The target of a run: a pure function of the run, with a defined fallback."""

from __future__ import annotations

from datetime import datetime
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
