"""Fivetran's REST API client where no server is needed: what it shows, what it says
when nothing listens. Against the stand-in: tests/integration/fivetran_events/test_fivetran_api.py.
"""

from __future__ import annotations

import time

import pytest

from fivetran_events.exceptions import FivetranUnavailable
from fivetran_events.fivetran_api import FivetranClient
from testkit.processes import free_port

KEY, SECRET = "test-key", "test-api-secret-value"


class TestCredentials:
    def test_its_repr_shows_neither_key_nor_secret(self) -> None:
        c = FivetranClient(KEY, SECRET, "http://127.0.0.1:9")
        assert KEY not in repr(c) and SECRET not in repr(c)


class TestTransport:
    def test_connection_refused(self) -> None:
        url = f"http://127.0.0.1:{free_port()}"
        started = time.monotonic()
        with pytest.raises(FivetranUnavailable) as caught:
            FivetranClient(KEY, SECRET, url, backoff=0.01, max_attempts=2).groups()
        assert time.monotonic() - started < 5.0
        assert str(caught.value) == (
            f"GET /v1/groups: cannot reach Fivetran at {url}: connection refused or host "
            "unreachable (gave up after 2 attempts)"
        )
        assert caught.value.maybe_sent is False
