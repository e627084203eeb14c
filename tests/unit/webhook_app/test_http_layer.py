"""One HTTP layer: every client we own reads a failure the same way."""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
import requests

from fivetran_events.exceptions import FivetranUnavailable
from fivetran_events.http import RetryableError, never_sent, quoted, retry_after_seconds
from webhook_app.airflow_client import AirflowUnavailable
from webhook_app.forwarding.asset import ReplicasShort
from webhook_app.forwarding.lineage import LineageUnavailable


def _refused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TestNeverSent:
    def test_a_refused_connection_never_reached_the_server(self) -> None:
        """Nothing listening: the request cannot have been applied."""
        with pytest.raises(requests.ConnectionError) as caught:
            requests.get(f"http://127.0.0.1:{_refused_port()}/", timeout=5)
        assert never_sent(caught.value) is True

    def test_a_connect_timeout_never_reached_the_server(self) -> None:
        assert never_sent(requests.ConnectTimeout("no connection")) is True

    def test_a_read_timeout_or_a_reset_may_have_been_applied(self) -> None:
        """The request left: a POST of unknown outcome must not be sent blindly again."""
        assert never_sent(requests.ReadTimeout("no answer")) is False
        assert never_sent(requests.ConnectionError("connection reset by peer")) is False


class TestQuoted:
    def test_a_body_is_quoted_on_one_line_and_cut(self) -> None:
        assert quoted("a\n  b\tc") == "a b c"
        assert quoted("x" * 600, limit=10) == "x" * 10 + "..."
        assert quoted(None) == ""


class TestRetryAfter:
    def test_an_http_date_is_read_as_seconds_from_now(self) -> None:
        now = datetime(2026, 1, 1, tzinfo=timezone.utc)
        header = format_datetime(now + timedelta(seconds=90), usegmt=True)
        assert retry_after_seconds(header, now=now.timestamp()) == 90.0

    def test_the_openlineage_sender_reads_a_date_too(self) -> None:
        """A 503 whose Retry-After is a date is waited out, not lost to a bare float()."""
        response = requests.Response()
        response.status_code = 503
        when = datetime.now(timezone.utc) + timedelta(seconds=600)
        response.headers["Retry-After"] = format_datetime(when, usegmt=True)
        error = LineageUnavailable(requests.HTTPError("503", response=response))
        assert error.retry_after is not None
        assert 500 < error.retry_after <= 600

    def test_garbage_asks_for_nothing(self) -> None:
        response = requests.Response()
        response.headers["Retry-After"] = "soon"
        assert LineageUnavailable(requests.HTTPError(response=response)).retry_after is None
        assert LineageUnavailable(ValueError("no response")).retry_after is None


class TestOneRetryableBase:
    @pytest.mark.parametrize(
        "error",
        [
            AirflowUnavailable("Airflow answered 503", retry_after=3.0),
            FivetranUnavailable("GET", "/v1/connections", "Fivetran answered 503", retry_after=3.0),
            LineageUnavailable(ValueError("refused")),
            ReplicasShort("only 0 of 1 replicas"),
        ],
        ids=["airflow", "fivetran", "openlineage", "replicas"],
    )
    def test_every_failure_that_may_pass_is_one_type(self, error: Exception) -> None:
        """The forwarder's retry takes any of them by the one base class."""
        assert isinstance(error, RetryableError)
        assert isinstance(error.retry_after, float | None)
        assert isinstance(error.maybe_sent, bool)

    def test_fivetrans_error_keeps_its_call_and_says_whether_it_was_sent(self) -> None:
        error = FivetranUnavailable("POST", "/v1/x", "no answer", maybe_sent=True)
        assert str(error) == "POST /v1/x: no answer"
        assert error.maybe_sent is True
        assert FivetranUnavailable("GET", "/v1/x", "refused").maybe_sent is False
