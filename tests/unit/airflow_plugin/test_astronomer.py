"""airflow_plugin.astronomer: astronomer's 2.4.0 classes, argument for argument.

``ASTRONOMER`` restates the ``__init__`` signatures of ``airflow-provider-fivetran-async``
2.4.0 (``fivetran_provider_async/operators.py``: ``FivetranOperator``,
``FivetranResyncOperator``; ``fivetran_provider_async/sensors.py``: ``FivetranSensor``)
and their ``template_fields``, so a DAG written for them binds the same way here; the
package itself (a dev dependency, pinned to 2.4) is compared too.
"""

from __future__ import annotations

import importlib
import inspect
import json
import warnings
from datetime import datetime, timedelta, timezone
from importlib.metadata import version
from typing import Any

import pytest

from airflow_plugin.astronomer import (
    FivetranOperator,
    FivetranResyncOperator,
    FivetranSensor,
    require_history,
)
from airflow_plugin.compat import AirflowFailException
from airflow_plugin.hooks import FivetranEventsRedisHook
from fivetran_events import Completion, Decision, Outcome

KW = "POSITIONAL_OR_KEYWORD"
OPERATOR = [
    ("connector_id", KW, None),
    ("connector_name", KW, None),
    ("destination_name", KW, None),
    ("run_name", KW, None),
    ("fivetran_conn_id", KW, "fivetran_default"),
    ("fivetran_retry_limit", KW, 3),
    ("fivetran_retry_delay", KW, 1),
    ("poll_frequency", KW, 15),
    ("schedule_type", KW, "manual"),
    ("reschedule_wait_time", KW, 0),
    ("deferrable", KW, True),
    ("wait_for_completion", KW, True),
    ("kwargs", "VAR_KEYWORD", inspect.Parameter.empty),
]
ASTRONOMER: dict[type, tuple[list[tuple[str, str, Any]], tuple[str, ...]]] = {
    FivetranOperator: (OPERATOR, ("connector_id", "connector_name", "destination_name")),
    FivetranResyncOperator: (
        [("scope", KW, None), ("kwargs", "VAR_KEYWORD", inspect.Parameter.empty)],
        ("connector_id", "connector_name", "destination_name"),
    ),
    FivetranSensor: (
        [
            ("connector_id", KW, None),
            ("connector_name", KW, None),
            ("destination_name", KW, None),
            ("fivetran_conn_id", KW, "fivetran_default"),
            ("poke_interval", KW, 60),
            ("fivetran_retry_limit", KW, 3),
            ("fivetran_retry_delay", KW, 1),
            ("completed_after_time", KW, None),
            ("reschedule_wait_time", KW, None),
            ("always_wait_when_syncing", KW, False),
            ("propagate_failures_forward", KW, False),
            ("deferrable", KW, True),
            ("kwargs", "VAR_KEYWORD", inspect.Parameter.empty),
        ],
        ("connector_id", "completed_after_time"),
    ),
}


class TestSignatures:
    @pytest.mark.parametrize("cls", list(ASTRONOMER), ids=lambda c: c.__name__)
    def test_every_argument_kind_and_default_is_astronomers(self, cls: type) -> None:
        assert signature(cls) == ASTRONOMER[cls][0]

    @pytest.mark.parametrize("cls", list(ASTRONOMER), ids=lambda c: c.__name__)
    def test_the_templated_fields_are_astronomers(self, cls: type) -> None:
        assert tuple(cls.template_fields) == ASTRONOMER[cls][1]  # type: ignore[attr-defined]


def signature(cls: type) -> list[tuple[str, str, Any]]:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # type: ignore[misc]
    return [(p.name, p.kind.name, p.default) for p in params]


class TestAgainstTheInstalledPackage:
    @pytest.mark.parametrize(
        ("module", "cls"),
        [
            ("operators", FivetranOperator),
            ("operators", FivetranResyncOperator),
            ("sensors", FivetranSensor),
        ],
        ids=lambda v: getattr(v, "__name__", v),
    )
    def test_its_signatures_and_templated_fields_are_ours(self, module: str, cls: type) -> None:
        assert version("airflow-provider-fivetran-async").startswith("2.4.")
        theirs = getattr(importlib.import_module(f"fivetran_provider_async.{module}"), cls.__name__)
        assert signature(cls) == signature(theirs)
        assert tuple(cls.template_fields) == tuple(theirs.template_fields)  # type: ignore[attr-defined]


class TestOperatorArguments:
    def test_the_defaults_drive_our_operator_as_astronomers_drive_its_own(self) -> None:
        """A forced sync (astronomer POSTs ``/force``), manual schedule, deferred, waited."""
        op = FivetranOperator(task_id="t", connector_id="c1")
        assert (op.force, op.schedule_type, op.deferrable, op.wait_for_completion) == (
            True,
            "manual",
            True,
            True,
        )
        assert (op.poll_frequency, op.reschedule_wait_time, op.run_name) == (15.0, 0, None)

    def test_fivetrans_retries_feed_our_clients(self, monkeypatch: pytest.MonkeyPatch) -> None:
        body = {"conn_type": "http", "host": "http://127.0.0.1:9", "login": "k", "password": "s"}
        monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_DEFAULT", json.dumps(body))
        op = FivetranOperator(
            task_id="t", connector_id="c1", fivetran_retry_limit=5, fivetran_retry_delay=2
        )
        assert (op.client.max_attempts, op.client.backoff) == (5, 2.0)
        sensor = FivetranSensor(
            task_id="s", connector_name="n", destination_name="d", fivetran_retry_limit=4
        )
        assert sensor.connector_id == "" and sensor.fivetran_retry_limit == 4

    def test_timeout_seconds_becomes_the_execution_timeout_with_astronomers_warning(
        self,
    ) -> None:
        with pytest.warns(DeprecationWarning, match="`timeout_seconds` is deprecated"):
            op = FivetranOperator(task_id="t", connector_id="c1", timeout_seconds=30)
        assert op.execution_timeout == timedelta(seconds=30)

    def test_connector_id_wins_over_names_and_names_need_each_other(self) -> None:
        op = FivetranOperator(
            task_id="t", connector_id="c1", connector_name="n", destination_name="d"
        )
        assert (op.connector_id, op.connector_name, op.destination_name) == ("c1", "n", "d")
        with pytest.raises(ValueError, match="connector_name goes with destination_name"):
            FivetranOperator(task_id="t", connector_name="n")
        with pytest.raises(ValueError, match="give connector_id"):
            FivetranSensor(task_id="s", connector_name="n")

    def test_a_resync_scope_passes_and_an_empty_one_means_the_whole_connection(self) -> None:
        scoped = FivetranResyncOperator(task_id="a", connector_id="c1", scope={"s": ["t"]})
        assert scoped.scope == {"s": ["t"]} and scoped.mode == "resync"
        assert FivetranResyncOperator(task_id="b", connector_id="c1", scope={}).scope is None


class TestXComs:
    def test_not_waiting_it_returns_the_time_of_the_request(self) -> None:
        op = FivetranOperator(task_id="t", connector_id="c1", wait_for_completion=False)
        assert op._asked_result(1_767_225_600_000) == "2026-01-01T00:00:00.000Z"

    def test_waiting_it_returns_the_end_of_the_sync(self) -> None:
        op = FivetranOperator(task_id="t", connector_id="c1")
        ended = Completion("s1", "SUCCESSFUL", 1_767_225_660_000, True)
        decision = Decision(Outcome.SUCCESS, "ok", 1_767_225_600_000, ended)
        assert op._result(decision, None, reconciled=False) == "2026-01-01T00:01:00.000Z"


class TestSensorArguments:
    def test_astronomers_defaults(self) -> None:
        s = FivetranSensor(task_id="s", connector_id="c1")
        assert (s.poke_interval, s.deferrable, s.completed_after_time) == (60, True, "")
        assert (s.propagate_failures_forward, s.always_wait_when_syncing) == (False, False)
        assert s.criterion == "ended_after"

    def test_completed_after_time_is_kept_as_text_as_astronomer_keeps_it(self) -> None:
        when = datetime(2026, 1, 2, tzinfo=timezone.utc)
        s = FivetranSensor(task_id="s", connector_id="c1", completed_after_time=when)
        assert s.completed_after_time == "2026-01-02T00:00:00+00:00"
        with pytest.raises(TypeError, match="completed_after_time"):
            FivetranSensor(task_id="s", connector_id="c1", completed_after_time=5)  # type: ignore[arg-type]

    def test_the_deprecated_xcom_and_reschedule_time_are_taken(self) -> None:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            s = FivetranSensor(task_id="s", connector_id="c1", xcom="2026-01-02", reschedule_time=9)
        assert (s.completed_after_time, s.reschedule_wait_time) == ("2026-01-02", 9)
        assert sum(issubclass(w.category, DeprecationWarning) for w in seen) == 2


class TestMissingHistoryConnection:
    def test_the_task_fails_at_once_naming_both_connections_and_the_fix(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv("AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS", raising=False)
        with pytest.raises(AirflowFailException) as raised:
            require_history(FivetranEventsRedisHook(), "fivetran_default")
        message = str(raised.value)
        assert "'fivetran_events_redis' is not defined" in message
        assert "'fivetran_default'" in message
        assert "AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS='redis://" in message
