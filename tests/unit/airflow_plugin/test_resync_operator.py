"""FivetranResyncOperator's scope: an empty one is refused when the DAG is parsed.

Fivetran answers 400 to an empty ``scope`` or table list (its "Re-sync Connection
Data" reference); sent as ``None`` it would resync the whole connection instead.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_plugin.operators.sync import FivetranResyncOperator


class TestScope:
    @pytest.mark.parametrize("scope", [{}, {"public": []}, {"public": "orders"}])
    def test_an_empty_scope_is_refused_before_any_call(self, scope: Any) -> None:
        with pytest.raises(ValueError, match=r"resync: .*resync scope"):
            FivetranResyncOperator(task_id="resync", connector_id="c1", scope=scope)

    def test_a_scope_or_none_is_taken(self) -> None:
        op = FivetranResyncOperator(task_id="a", connector_id="c1", scope={"s": ("t1", "t2")})
        assert op.scope == {"s": ["t1", "t2"]}
        assert FivetranResyncOperator(task_id="b", connector_id="c1").scope is None
