"""Fixtures of the forwarding tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fivetran_events import Settings
from testkit.airflow2_standin import Airflow2StandIn, running_airflow2_standin
from testkit.forward_support import URI, forwarder
from webhook_app.forwarding.worker import Forwarder


@pytest.fixture
def airflow2_standin() -> Iterator[Airflow2StandIn]:
    """The Airflow 2 REST stand-in on a free loopback port, with no datasets yet."""
    with running_airflow2_standin() as fake:
        yield fake


@pytest.fixture
def standin(airflow2_standin: Airflow2StandIn) -> Airflow2StandIn:
    """The stand-in knowing the dataset of testkit.forward_support's connector (URI)."""
    airflow2_standin.add_dataset(URI)
    return airflow2_standin


@pytest.fixture
def fw(settings: Settings, standin: Airflow2StandIn) -> Forwarder:
    """A worker's Forwarder talking to that stand-in."""
    return forwarder(
        settings,
        standin.url,
        standin.username,
        standin.password,
    )
