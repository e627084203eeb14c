"""The harnesses' random passwords go on command lines (``airflow users create``)."""

from __future__ import annotations

import secrets

import pytest

from testkit.support import cli_password


class TestCliPassword:
    def test_a_token_that_begins_with_a_dash_is_not_handed_out(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """argparse reads ``--password -x...`` as an unknown option ``-x...``: one random
        token in 64 began so, and the Airflow 2 harness failed to start."""
        monkeypatch.setattr(secrets, "token_urlsafe", lambda nbytes=None: "-Zk3" + "a" * 18)
        assert not cli_password().startswith("-")

    def test_it_is_random_and_long_enough(self) -> None:
        drawn = {cli_password() for _ in range(500)}
        assert len(drawn) == 500
        assert all(len(p) >= 22 and not p.startswith("-") for p in drawn)
