"""deploy/'s systemd units give their secrets as credentials, never in the environment
(their hardening, rated by systemd-analyze: tests/integration/deploy/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit.deploy_files import UNITS

#: What a unit's settings may hold that is a secret (the Redis URL carries a password).
SECRET_SETTINGS = re.compile(
    r"FIVETRAN_EVENTS_(WEBHOOK_SECRETS|API_TOKENS|REDIS_URL|AIRFLOW_PASSWORD|"
    r"FIVETRAN_API_KEY|FIVETRAN_API_SECRET|REDIS_\w*PASSWORD)\b"
)


def test_there_are_units() -> None:
    assert {u.name for u in UNITS} >= {
        "fivetran-events-web.service",
        "fivetran-events-worker@.service",
    }


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
class TestUnit:
    def test_secrets_arrive_as_credentials(self, unit: Path) -> None:
        """Every secret the unit passes is a LoadCredential= named like the setting (the
        app reads $CREDENTIALS_DIRECTORY); none is in Environment= or the unit's text."""
        lines = [line.strip() for line in unit.read_text().splitlines()]
        settings = [line for line in lines if not line.startswith("#")]
        credentials = [line for line in settings if line.startswith("LoadCredential=")]
        assert any("fivetran_events_redis_url:" in line for line in credentials)
        for line in credentials:
            name = line.split("=", 1)[1].split(":", 1)[0]
            assert SECRET_SETTINGS.fullmatch(name.upper()), name
        environment = [line for line in settings if line.startswith("Environment=")]
        assert not [line for line in environment if SECRET_SETTINGS.search(line)]
