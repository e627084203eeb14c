"""One HTTP layer: every client we own reads a failure the same way."""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
import requests

from fivetran_events.exceptions import (
    FIVETRAN,
    FivetranAuthFailed,
    FivetranNotFound,
    FivetranUnavailable,
)
from fivetran_events.http import (
    NotFound,
    Rejected,
    RetryableError,
    Unavailable,
    backoff,
    classify,
    never_sent,
    quoted,
    retry_after_seconds,
)
from webhook_app.exceptions import (
    AIRFLOW,
    AirflowRejected,
    AirflowUnavailable,
    LineageUnavailable,
    ReplicasShort,
)


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
            AirflowUnavailable(
                "POST", "/api/v2/assets/events", "Airflow answered 503", retry_after=3.0
            ),
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
        assert FivetranUnavailable("GET", "/v1/x", "refused", maybe_sent=False).maybe_sent is False


def answer(status: int, retry_after: str | None = None) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp._content = b'{"detail": "said"}'
    if retry_after is not None:
        resp.headers["Retry-After"] = retry_after
    return resp


class TestOneClassification:
    @pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422, 429, 500, 502, 503, 504])
    def test_fivetran_and_airflow_read_a_status_alike(self, status: int) -> None:
        """One function reads every answer: both services' errors are the same kind, with
        the same maybe_sent (429 and 503 were not handled; other 5xx may have been)."""
        fivetran = classify(FIVETRAN, "POST", "/v1/x", answer(status, "7"))
        airflow = classify(AIRFLOW, "POST", "/api/v2/assets/events", answer(status, "7"))
        assert fivetran is not None and airflow is not None
        for base in (Unavailable, Rejected, NotFound):
            assert isinstance(fivetran, base) == isinstance(airflow, base), base
        assert (
            fivetran.maybe_sent
            == airflow.maybe_sent
            == (status not in (429, 503) and status >= 500)
        )
        assert fivetran.status == airflow.status == status
        retryable = status == 429 or status >= 500
        assert isinstance(airflow, RetryableError) is retryable
        assert airflow.retry_after == (7.0 if retryable else None)
        assert str(airflow) == f"POST /api/v2/assets/events: Airflow answered {status}: " + (
            '{"detail": "said"}'
        )

    def test_a_success_is_no_error(self) -> None:
        assert classify(AIRFLOW, "GET", "/api/v2/assets", answer(200)) is None

    def test_fivetrans_own_classes_keep_their_roles(self) -> None:
        assert isinstance(classify(FIVETRAN, "GET", "/v1/x", answer(401)), FivetranAuthFailed)
        assert isinstance(classify(FIVETRAN, "GET", "/v1/x", answer(404)), FivetranNotFound)
        assert isinstance(classify(AIRFLOW, "GET", "/x", answer(404)), AirflowRejected)


class TestBackoff:
    def test_doubles_from_the_first_wait_up_to_the_most(self) -> None:
        assert [backoff(n, 0.5, 4.0) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]

    def test_jitter_keeps_half_and_scales_half(self) -> None:
        assert backoff(3, 1.0, 300.0, jitter=0.0) == 2.0
        assert backoff(3, 1.0, 300.0, jitter=1.0) == 4.0

    def test_a_huge_attempt_count_does_not_overflow(self) -> None:
        assert backoff(10_000, 1.0, 300.0) == 300.0
