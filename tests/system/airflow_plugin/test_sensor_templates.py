"""The sensor's template fields render as Airflow renders them; plain text skips Jinja.

In this process's Airflow (no server): a DAG, its sensor, Airflow's own
``render_template_fields`` with the environment it builds for the DAG.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

CONTEXT: dict[str, Any] = {"ds_nodash": "20260110", "params": {}}


def sensor(dag_kwargs: dict[str, Any], **fields: Any) -> Any:
    from airflow.sdk import DAG

    from airflow_plugin.sensors import FivetranDateTimeSensor

    with DAG(
        "templates",
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        **dag_kwargs,
    ):
        return FivetranDateTimeSensor(task_id="wait", **fields)


def airflows_rendering(task: Any, value: Any) -> Any:
    """What Airflow's own render_template gives for ``value`` (no shortcut)."""
    from airflow.sdk import BaseOperator

    context: Any = dict(CONTEXT)
    return BaseOperator.render_template(task, value, context, task.get_template_env())


def compiled(task: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Render the task's fields; return the strings Jinja compiled on the way."""
    env = task.get_template_env()
    seen: list[str] = []
    compile_ = env.from_string

    def from_string(source: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(source)
        return compile_(source, *args, **kwargs)

    monkeypatch.setattr(env, "from_string", from_string)
    task.render_template_fields(dict(CONTEXT), jinja_env=env)
    return seen


@pytest.mark.parametrize(
    ("dag_kwargs", "connector_id", "target_time", "want_id", "want_target", "want_compiled"),
    [
        ({}, "bf_conn", None, "bf_conn", None, []),
        ({}, "c_{{ ds_nodash }}", "2026-01-10", "c_20260110", "2026-01-10", ["c_{{ ds_nodash }}"]),
        ({}, "bf_conn", "{{ ds_nodash }}T00", "bf_conn", "20260110T00", ["{{ ds_nodash }}T00"]),
        (
            {
                "jinja_environment_kwargs": {
                    "variable_start_string": "[[",
                    "variable_end_string": "]]",
                }
            },
            "c_[[ ds_nodash ]]",
            "{{ kept }}",
            "c_20260110",
            "{{ kept }}",
            ["c_[[ ds_nodash ]]"],
        ),
        # Native rendering makes "123" the number 123: Airflow's way, not skipped.
        ({"render_template_as_native_obj": True}, "123", None, 123, None, ["123"]),
    ],
)
def test_fields_render_as_airflow_renders_them(
    monkeypatch: pytest.MonkeyPatch,
    dag_kwargs: dict[str, Any],
    connector_id: str,
    target_time: str | None,
    want_id: Any,
    want_target: Any,
    want_compiled: list[str],
) -> None:
    task = sensor(dag_kwargs, connector_id=connector_id, target_time=target_time)
    expected = (airflows_rendering(task, connector_id), airflows_rendering(task, target_time))
    assert expected == (want_id, want_target)
    assert compiled(task, monkeypatch) == want_compiled
    assert (task.connector_id, task.target_time) == expected
