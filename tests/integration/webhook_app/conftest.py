"""Fixtures of the forwarding tests and of the CLI tests that talk to Fivetran."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fivetran_events import Settings
from testkit.airflow2_standin import Airflow2StandIn, running_airflow2_standin
from testkit.fivetran_api import TEST_API_KEY, TEST_API_SECRET, FivetranStandIn, serving
from testkit.forward_support import URI, forwarder
from testkit.support import OTHER_SECRET, SECRET
from testkit.worker_process import worker_env
from webhook_app.forwarding.forwarder import Forwarder


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


@pytest.fixture
def api() -> Iterator[FivetranStandIn]:
    """Fivetran's REST API stand-in, accepting TEST_API_KEY and TEST_API_SECRET."""
    with serving(FivetranStandIn(api_key=TEST_API_KEY, api_secret=TEST_API_SECRET)) as standin:
        yield standin


@pytest.fixture
def env(settings: Settings, api: FivetranStandIn) -> dict[str, str]:
    """The CLI's environment: the suite's Redis, the stand-in's URL, key and secret, and
    the webhook app's current secrets."""
    return worker_env(
        settings,
        fivetran_api_url=api.url,
        fivetran_api_key=TEST_API_KEY,
        fivetran_api_secret=TEST_API_SECRET,
        webhook_secrets=f"{SECRET},{OTHER_SECRET}",
    )
