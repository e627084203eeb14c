"""bench/backfill.py's worker-slot seconds from Airflow's task_instance rows, and the DAG
files it and bench/gated.py write."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from bench import gated
from bench.backfill import SENSOR_DAGS, slot_seconds


class TestSlotSeconds:
    def test_sums_each_task_instances_end_minus_start_as_airflow_stores_them(self) -> None:
        rows = [
            ("2026-12-05 22:00:00.000000", "2026-12-05 22:00:01.500000", None),
            ("2026-12-05 22:00:02.250000+00:00", "2026-12-05 22:00:03.000000+00:00", ""),
        ]
        assert slot_seconds(rows) == pytest.approx(2.25)

    def test_sums_the_aware_datetimes_psycopg_returns(self) -> None:
        at = datetime(2026, 12, 5, 22, tzinfo=timezone.utc)
        later = at.replace(second=3, microsecond=500_000)
        assert slot_seconds([(at, later, None)]) == pytest.approx(3.5)

    def test_no_task_instance_is_no_slot_time(self) -> None:
        assert slot_seconds([]) == 0.0

    def test_refuses_a_task_instance_that_deferred(self) -> None:
        rows = [("2026-12-05 22:00:00", "2026-12-05 22:10:00", "execute_complete")]
        with pytest.raises(ValueError, match="deferred"):
            slot_seconds(rows)

    def test_refuses_an_unfinished_task_instance(self) -> None:
        with pytest.raises(ValueError, match="not finished"):
            slot_seconds([("2026-12-05 22:00:00", None, None)])


class TestSensorDags:
    def test_both_dags_render_with_the_run_template_left_for_airflow(self) -> None:
        source = SENSOR_DAGS.format(
            start="2026-11-01", runs=8, ours="o", theirs="t", connector="part_a"
        )
        compile(source, "bench_backfill_sensors.py", "exec")
        assert '"{{ data_interval_end }}"' in source
        assert 'DAG("o", **ARGS)' in source and 'DAG("t", **ARGS)' in source


class TestGatedDags:
    def test_the_gated_and_late_dags_render_with_the_connectors_asset(self) -> None:
        source = gated.GATED_DAG.format(dag_id="g", connector="part_a", start="2026-11-01", runs=2)
        compile(source, "bench_gated.py", "exec")
        assert 'schedule=gated("part_a")' in source and "catchup=True" in source
        assert 'Asset(f"fivetran://connector/{connector}")' in source
        late = gated.LATE_DAGS.format(
            gated="lg", ours="lo", connector="late_conn", start="2026-11-01", timeout=40
        )
        compile(late, "bench_gated_late.py", "exec")
        assert 'DAG("lg", schedule=gated("late_conn")' in late
        assert 'FivetranDateTimeSensor(task_id="wait", connector_id="late_conn"' in late
