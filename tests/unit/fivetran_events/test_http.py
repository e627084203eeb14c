"""fivetran_events/http.py's one reading of an answer, over every status, header and attempt
(the two services' classes side by side: tests/unit/webhook_app/test_http_layer.py)."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from email.utils import format_datetime

import requests
from hypothesis import example, given
from hypothesis import strategies as st

from fivetran_events.http import (
    QUOTE_LIMIT,
    Family,
    NotFound,
    Rejected,
    Unavailable,
    backoff,
    classify,
    quoted,
    retry_after_seconds,
)


class Down(Unavailable):
    pass


class Refused(Rejected):
    pass


class Missing(NotFound):
    pass


class LoggedOut(Rejected):
    pass


FAMILY = Family("Svc", Down, Refused, Missing)
WITH_AUTH = Family("Svc", Down, Refused, Missing, auth_failed=LoggedOut)
NOW = 1_800_000_000.0


def answer(status: int, body: str = "", retry_after: str | None = None) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp._content = body.encode()
    resp.encoding = "utf-8"
    if retry_after is not None:
        resp.headers["Retry-After"] = retry_after
    return resp


class TestClassify:
    @example(199)
    @example(200)
    @example(299)
    @example(300)
    @example(399)
    @example(400)
    @example(401)
    @example(404)
    @example(428)
    @example(429)
    @example(430)
    @example(499)
    @example(500)
    @example(502)
    @example(503)
    @example(504)
    @given(st.integers(100, 599))
    def test_each_status_gets_its_class(self, status: int) -> None:
        error = classify(FAMILY, "POST", "/x", answer(status))
        if 200 <= status < 300:
            assert error is None
            return
        assert error is not None and error.status == status
        expected = (
            Missing if status == 404 else Refused if 400 <= status < 500 and status != 429 else Down
        )
        assert type(error) is expected
        assert str(error).startswith(f"POST /x: Svc answered {status}")

    @example(300)
    @example(400)
    @example(404)
    @example(429)
    @example(499)
    @example(500)
    @example(502)
    @example(503)
    @example(504)
    @given(st.integers(100, 599).filter(lambda s: not 200 <= s < 300))
    def test_maybe_sent_is_false_only_when_the_server_refused_it(self, status: int) -> None:
        """429, 503 and a 4xx were not applied; any other answer may come after it was."""
        error = classify(FAMILY, "POST", "/x", answer(status))
        assert error is not None
        assert error.maybe_sent is not (status in (429, 503) or 400 <= status < 500)

    def test_401_and_403_are_the_familys_login_failure_when_it_has_one(self) -> None:
        for status in (401, 403):
            assert type(classify(WITH_AUTH, "GET", "/x", answer(status))) is LoggedOut
            assert type(classify(FAMILY, "GET", "/x", answer(status))) is Refused
        assert type(classify(WITH_AUTH, "GET", "/x", answer(404))) is Missing

    @given(st.sampled_from([429, 500, 502, 503, 504]), st.integers(0, 10**6))
    def test_retry_after_is_read_on_the_answers_that_ask_to_wait(
        self, status: int, seconds: int
    ) -> None:
        error = classify(FAMILY, "GET", "/x", answer(status, retry_after=str(seconds)))
        assert error is not None and error.retry_after == seconds

    def test_a_4xx_asks_for_no_wait_whatever_it_says(self) -> None:
        error = classify(FAMILY, "GET", "/x", answer(400, retry_after="30"))
        assert error is not None and error.retry_after is None

    @given(st.text(min_size=1, max_size=2000))
    def test_the_body_is_quoted_on_one_line_and_cut(self, body: str) -> None:
        error = classify(FAMILY, "GET", "/x", answer(500, body))
        assert error is not None and "\n" not in str(error)
        assert quoted(body) in str(error)
        assert len(error.reason) <= len("Svc answered 500: ") + QUOTE_LIMIT + len("...")

    def test_what_the_service_said_replaces_the_body(self) -> None:
        error = classify(FAMILY, "GET", "/x", answer(400, "raw"), said="its message")
        assert error is not None and error.reason == "Svc answered 400: its message"


class TestRetryAfter:
    @given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
    def test_seconds_are_read_as_given(self, seconds: float) -> None:
        assert retry_after_seconds(repr(seconds), now=NOW) == seconds

    @given(st.integers(0, 10**7))
    def test_a_date_is_seconds_from_now(self, ahead: int) -> None:
        when = datetime.fromtimestamp(NOW + ahead, tz=timezone.utc)
        got = retry_after_seconds(format_datetime(when, usegmt=True), now=NOW)
        assert got is not None and math.isclose(got, ahead, abs_tol=1)

    def test_a_date_past_is_no_wait(self) -> None:
        when = datetime.fromtimestamp(NOW - 60, tz=timezone.utc)
        assert retry_after_seconds(format_datetime(when, usegmt=True), now=NOW) == 0.0

    @given(st.text(max_size=40))
    def test_anything_else_is_none_or_a_wait_never_an_error(self, text: str) -> None:
        got = retry_after_seconds(text, now=NOW)
        assert got is None or (got >= 0 and not math.isnan(got))

    def test_negative_and_nan_ask_for_nothing(self) -> None:
        for text in ("-1", "nan", "NaN", "", None):
            assert retry_after_seconds(text, now=NOW) is None


class TestBackoff:
    @given(
        st.integers(1, 200),
        st.floats(0.01, 100),
        st.floats(0.01, 1000),
        st.none() | st.floats(0, 1),
    )
    def test_grows_never_past_the_most_and_jitter_keeps_half(
        self, attempt: int, first: float, most: float, jitter: float | None
    ) -> None:
        wait = backoff(attempt, first, most, jitter)
        ceiling = backoff(attempt, first, most)
        assert ceiling <= most and ceiling <= backoff(attempt + 1, first, most)
        if jitter is not None:
            assert ceiling / 2 <= wait <= ceiling

    def test_the_first_attempt_waits_the_first_wait(self) -> None:
        assert backoff(1, 2.0, 60.0) == 2.0 and backoff(0, 2.0, 60.0) == 2.0
        assert [backoff(n, 1.0, 10.0) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
