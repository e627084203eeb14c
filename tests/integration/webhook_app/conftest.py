"""Fixtures of the forwarding tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.airflow2_standin import Airflow2, running_airflow2


@pytest.fixture
def af2() -> Iterator[Airflow2]:
    """The Airflow 2 REST stand-in on a free loopback port, with no datasets yet."""
    with running_airflow2() as fake:
        yield fake
