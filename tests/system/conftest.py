"""Fixtures of the system tests: real Airflow 3 and 2.11, loaded only for this folder.

``airflow3`` (3.x, testkit/airflow_harness.py) and ``airflow2`` (2.11 in its own venv,
testkit/airflow2_harness.py) are session-scoped; ``airflow_db`` migrates the in-process
Airflow home that ``dag.test()`` uses (testkit/airflow_env.py).
"""

from __future__ import annotations

import pytest

from testkit.airflow2_harness import airflow2  # noqa: F401
from testkit.airflow_env import airflow_db  # noqa: F401
from testkit.airflow_harness import airflow3  # noqa: F401


@pytest.fixture(autouse=True)
def _whole_airflow3(request: pytest.FixtureRequest) -> None:
    """Before a test of the session's Airflow 3, start again a component an earlier test
    left dead (its own test failed for it; this one should not)."""
    if "airflow3" in request.fixturenames:
        request.getfixturevalue("airflow3").revive()
