"""Fivetran's signature: HMAC-SHA256 of the raw body, upper-case hex."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from fivetran_events.model import sign, verify

BODY = b'{"event":"test_event"}'


class TestVerify:
    def test_fivetran_upper_case(self) -> None:
        """The upper-case hex Fivetran sends verifies."""
        sig = hmac.new(b"s3cret", BODY, hashlib.sha256).hexdigest().upper()
        assert sig == sign(BODY, "s3cret")
        assert verify(BODY, sig, ["s3cret"])

    def test_lower_case_too(self) -> None:
        assert verify(BODY, sign(BODY, "s3cret").lower(), ["s3cret"])

    def test_any_of_several_secrets(self) -> None:
        """During a rotation the old and the new secret both verify."""
        assert verify(BODY, sign(BODY, "new"), ["old", "new"])

    @pytest.mark.parametrize(
        "header",
        [None, "", "zz", "A" * 64, sign(BODY, "other"), sign(BODY + b" ", "s3cret"), "é" * 64],
    )
    def test_rejects(self, header: str | None) -> None:
        """Missing, malformed, wrong-secret or other-body signatures fail."""
        assert not verify(BODY, header, ["s3cret"])

    def test_no_secrets_rejects(self) -> None:
        assert not verify(BODY, sign(BODY, "x"), [])
