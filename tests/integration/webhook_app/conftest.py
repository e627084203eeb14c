"""Fixtures of the forwarding tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.airflow2_standin import Airflow2StandIn, running_airflow2_standin


@pytest.fixture
def airflow2_standin() -> Iterator[Airflow2StandIn]:
    """The Airflow 2 REST stand-in on a free loopback port, with no datasets yet."""
    with running_airflow2_standin() as fake:
        yield fake
