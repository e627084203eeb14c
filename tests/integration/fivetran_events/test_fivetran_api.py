"""Fivetran's REST API through our client, against the stand-in served on 127.0.0.1.

The stand-in (testkit/fivetran_api.py) answers as Fivetran documents it: paged
collections, Fivetran's error bodies, 401 on a wrong key, 429 with Retry-After on demand.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import pytest

from fivetran_events.exceptions import (
    FivetranAuthFailed,
    FivetranNotFound,
    FivetranRejected,
    FivetranUnavailable,
)
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.fivetran_records import describe
from fivetran_events.model import SIGNATURE_HEADER, verify
from testkit.fivetran_api import FivetranStandIn, serving
from testkit.processes import poll_until
from testkit.servers import serving_in_thread

KEY, SECRET = "test-key", "test-api-secret-value"


@pytest.fixture
def api() -> Iterator[FivetranStandIn]:
    with serving(FivetranStandIn(api_key=KEY, api_secret=SECRET)) as standin:
        yield standin


def client(url: str, **kwargs: Any) -> FivetranClient:
    kwargs.setdefault("backoff", 0.01)
    return FivetranClient(KEY, SECRET, url, **kwargs)


class TestCollections:
    def test_every_page_is_read(self, api: FivetranStandIn) -> None:
        """2,500 connections come back whole over three pages of 1,000, in order."""
        for n in range(2500):
            api.connector(f"c{n:04d}", group_id="g1" if n % 2 else "g2")
        got = client(api.url).connections()
        assert [c.id for c in got] == [f"c{n:04d}" for n in range(2500)]
        assert api.calls["GET /v1/connections"] == 3

    def test_small_pages_and_a_group_filter(self, api: FivetranStandIn) -> None:
        for n in range(7):
            api.connector(f"c{n}", group_id="g1" if n % 2 else "g2")
        c = client(api.url)
        got = list(c.items("/v1/connections", {"group_id": "g1"}, page_size=2))
        assert [i["id"] for i in got] == ["c1", "c3", "c5"]
        assert api.calls["GET /v1/connections"] == 2
        assert [x.id for x in c.connections("g2")] == ["c0", "c2", "c4", "c6"]

    def test_a_connection_as_fivetran_describes_it(self, api: FivetranStandIn) -> None:
        ended = datetime(2026, 1, 10, 6, tzinfo=timezone.utc)
        api.connector("assimilate_seem", succeeded_at=ended, sync_state="syncing")
        got = client(api.url).connection("assimilate_seem")
        assert (got.id, got.group_id, got.schema) == (
            "assimilate_seem",
            "inappropriate_implode",
            "ftar_pg",
        )
        assert got.succeeded_at == ended and got.failed_at is None
        assert got.sync_state == "syncing" and got.paused is False
        assert describe(got)["succeeded_at"] == "2026-01-10T06:00:00.000Z"

    def test_groups(self, api: FivetranStandIn) -> None:
        api.group("projected_sickle", "Staging")
        api.group("schoolmaster_heedless", "Production")
        got = client(api.url).groups()
        assert [(g.id, g.name) for g in got] == [
            ("projected_sickle", "Staging"),
            ("schoolmaster_heedless", "Production"),
        ]


class TestErrors:
    def test_404_names_the_call_and_fivetrans_words(self, api: FivetranStandIn) -> None:
        with pytest.raises(FivetranNotFound) as caught:
            client(api.url).connection("no_such")
        exc = caught.value
        assert str(exc) == (
            "GET /v1/connections/no_such: Fivetran answered 404: NotFound_Connection "
            "Connection with id 'no_such' doesn't exist"
        )
        assert (exc.status, exc.code) == (404, "NotFound_Connection")

    def test_an_id_stays_one_path_segment(self, api: FivetranStandIn) -> None:
        """An id with '/' or '..' cannot reach another endpoint: it is quoted whole."""
        api.connector("real")
        with pytest.raises(FivetranNotFound, match="doesn't exist"):
            client(api.url).connection("../connections/real")

    def test_401_is_an_auth_failure_and_says_no_secret(self, api: FivetranStandIn) -> None:
        wrong = FivetranClient(KEY, "wrong-secret", api.url)
        with pytest.raises(FivetranAuthFailed) as caught:
            wrong.webhooks()
        assert str(caught.value) == (
            "GET /v1/webhooks: Fivetran answered 401: AuthFailed Invalid API key or secret"
        )
        assert "wrong-secret" not in repr(wrong) and "wrong-secret" not in str(caught.value)
        assert KEY not in repr(wrong)

    def test_a_bad_request_is_rejected_not_retried(self, api: FivetranStandIn) -> None:
        c = client(api.url)
        with pytest.raises(FivetranRejected, match="limit must be"):
            list(c.items("/v1/groups", page_size=5000))
        assert api.calls["400"] == 1


class TestRetries:
    def test_429_waits_out_retry_after(self, api: FivetranStandIn) -> None:
        """Two 429s asking for 1 s each: the call succeeds after about 2 s, not sooner."""
        api.group("g1")
        api.fail_next(2, retry_after="1")
        started = time.monotonic()
        assert [g.id for g in client(api.url).groups()] == ["g1"]
        took = time.monotonic() - started
        assert 2.0 <= took < 10.0, took
        assert api.calls["429"] == 2 and api.calls["GET /v1/groups"] == 1

    def test_a_retry_after_past_the_cap_fails_at_once(self, api: FivetranStandIn) -> None:
        api.fail_next(1, retry_after="3600")
        started = time.monotonic()
        with pytest.raises(FivetranUnavailable) as caught:
            client(api.url, max_retry_after=5).webhooks()
        assert time.monotonic() - started < 2.0
        assert "asked to retry after 3600 s, longer than the 5 s this client waits" in str(
            caught.value
        )
        assert caught.value.retry_after == 3600.0 and api.calls["429"] == 1

    def test_retries_are_bounded(self, api: FivetranStandIn) -> None:
        """Fivetran answering 503 for ever: three attempts, then a clear error."""
        api.fail_next(10, status=503, retry_after=None)
        with pytest.raises(FivetranUnavailable) as caught:
            client(api.url, max_attempts=3).groups()
        assert str(caught.value) == (
            "GET /v1/groups: Fivetran answered 503: Error Something went wrong "
            "(gave up after 3 attempts)"
        )
        assert api.calls["503"] == 3

    def test_a_post_that_may_have_landed_is_not_sent_twice(self, api: FivetranStandIn) -> None:
        """A 502 to a create may have created it: no second POST, say so instead."""
        api.fail_next(1, status=502, retry_after=None)
        with pytest.raises(FivetranUnavailable) as caught:
            client(api.url).create_account_webhook("http://127.0.0.1:9/", ["sync_end"], "s")
        assert caught.value.maybe_sent is True
        assert api.calls["502"] == 1 and api.total_calls == 1

    @pytest.mark.parametrize("status", [429, 503])
    def test_a_429_or_503_to_a_post_is_retried(self, api: FivetranStandIn, status: int) -> None:
        """429 and 503 mean the call was not handled (the one rule of fivetran_events/http.py,
        Airflow's client's too): a create is sent again after the wait."""
        api.fail_next(1, status=status, retry_after="0")
        with pytest.raises(FivetranRejected, match="Webhook test failed"):
            client(api.url).create_account_webhook("http://127.0.0.1:9/", ["sync_end"], "s")
        assert api.calls[str(status)] == 1 and api.calls["400"] == 1


class TestTransport:
    def test_a_silent_server_times_out(self, api: FivetranStandIn) -> None:
        """Answers held back past the timeout: each attempt ends at the timeout."""
        api.delay_seconds = 1.0
        started = time.monotonic()
        with pytest.raises(FivetranUnavailable, match=r"no answer within 0\.2 s"):
            client(api.url, timeout=0.2, max_attempts=2).groups()
        assert time.monotonic() - started < 1.5

    def test_an_answer_that_is_not_fivetrans_json(self) -> None:
        """A proxy's HTML page with a 200 is an error naming the call, not a crash."""

        class Proxy(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                raw = b"<html>gateway login</html>"
                self.send_response(200)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        server = HTTPServer(("127.0.0.1", 0), Proxy)
        with serving_in_thread(server):
            url = f"http://127.0.0.1:{server.server_address[1]}"
            with pytest.raises(FivetranUnavailable, match="not its JSON: <html>gateway login"):
                client(url).groups()

    def test_a_reset_mid_answer_is_retried_for_a_get(self) -> None:
        """The first connection is dropped before any answer; the GET is sent again."""
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        seen: list[int] = []

        def serve() -> None:
            for n in range(2):
                conn, _ = listener.accept()
                conn.recv(65536)
                seen.append(n)
                if n == 0:
                    conn.close()  # no answer at all
                    continue
                body = b'{"code":"Success","data":{"items":[]}}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                    + body
                )
                conn.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            assert client(f"http://127.0.0.1:{port}").groups() == []
        finally:
            thread.join(5)
            listener.close()
        assert seen == [0, 1]


class Receiver(BaseHTTPRequestHandler):
    """A webhook target that checks Fivetran's signature as the app does (200, else 401)."""

    secret = "receiver-secret"
    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        ok = verify(raw, self.headers.get(SIGNATURE_HEADER), [self.secret])
        if ok:
            self.bodies.append(json.loads(raw))
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.bodies = []
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    with serving_in_thread(server):
        yield f"http://127.0.0.1:{server.server_address[1]}/webhooks/fivetran"


class TestWebhooks:
    def test_create_get_list_test_delete(self, api: FivetranStandIn, receiver: str) -> None:
        """The whole life of a webhook; each POST to the target was signed with its secret."""
        api.group("g1")
        c = client(api.url)
        account = c.create_account_webhook(receiver, ["sync_start", "sync_end"], Receiver.secret)
        group = c.create_group_webhook("g1", receiver, ["sync_end"], Receiver.secret, active=False)
        assert (account.type, account.group_id, account.active) == ("account", None, True)
        assert (group.type, group.group_id, group.active) == ("group", "g1", False)
        assert [b["event"] for b in Receiver.bodies] == ["test_event"]  # an inactive one: none
        assert c.webhook(account.id) == account
        assert [w.id for w in c.webhooks()] == [account.id, group.id]
        result = c.test_webhook(account.id, "sync_end")
        assert (result.succeed, result.status) == (True, 200)
        assert Receiver.bodies[-1]["event"] == "sync_end"
        with pytest.raises(FivetranNotFound, match=r"GET /v1/webhooks/missing: .*404"):
            c.webhook("missing")

    def test_a_create_whose_test_is_refused_creates_nothing(
        self, api: FivetranStandIn, receiver: str
    ) -> None:
        with pytest.raises(FivetranRejected) as caught:
            client(api.url).create_account_webhook(receiver, ["sync_end"], "another-secret")
        assert caught.value.status == 400 and "status 401" in str(caught.value)
        assert api.webhooks == {} and Receiver.bodies == []


class TestSyncs:
    """``sync_connection``/``resync_connection``/``update_connection`` against the
    stand-in, which runs the sync and sends its signed webhooks as Fivetran documents
    (fivetran.com/docs/rest-api/api-reference/connections/...)."""

    @pytest.fixture
    def syncing(self, api: FivetranStandIn, receiver: str) -> FivetranStandIn:
        api.connector("c1")
        api.sync_seconds = 0.3
        api.webhook_url, api.webhook_secret = receiver, Receiver.secret
        return api

    def events(self) -> list[tuple[str, str]]:
        return [(b["event"], b.get("data", {}).get("status", "")) for b in Receiver.bodies]

    def test_a_sync_starts_ends_and_is_delivered(self, syncing: FivetranStandIn) -> None:
        """sync_start then sync_end SUCCESSFUL, signed; succeeded_at moves; 1 call."""
        before = datetime.now(timezone.utc)
        client(syncing.url).sync_connection("c1")
        poll_until(lambda: len(Receiver.bodies) == 2, "both webhooks")
        assert self.events() == [("sync_start", ""), ("sync_end", "SUCCESSFUL")]
        assert Receiver.bodies[0]["sync_id"] == Receiver.bodies[1]["sync_id"]
        conn = client(syncing.url).connection("c1")
        assert conn.succeeded_at is not None and conn.succeeded_at >= before
        assert conn.sync_state == "scheduled"
        assert syncing.calls["POST /v1/connections/{id}/sync"] == 1

    def test_a_request_while_syncing_starts_nothing_without_force(
        self, syncing: FivetranStandIn
    ) -> None:
        """As Fivetran documents: 'will sync only if it isn't currently syncing' (200)."""
        c = client(syncing.url)
        c.sync_connection("c1")
        c.sync_connection("c1")
        poll_until(lambda: len(Receiver.bodies) == 2, "both webhooks")
        assert [s[1] for s in syncing.started] == [Receiver.bodies[0]["sync_id"]]
        assert syncing.calls["POST /v1/connections/{id}/sync"] == 2

    def test_force_stops_the_running_sync_and_runs_a_new_one(
        self, syncing: FivetranStandIn
    ) -> None:
        c = client(syncing.url)
        c.sync_connection("c1")
        c.sync_connection("c1", force=True)
        poll_until(lambda: len(Receiver.bodies) == 4, "four webhooks")
        assert self.events() == [
            ("sync_start", ""),
            ("sync_end", "CANCELED"),
            ("sync_start", ""),
            ("sync_end", "SUCCESSFUL"),
        ]
        assert len(syncing.started) == 2

    def test_resync_with_a_scope_and_a_failing_sync(self, syncing: FivetranStandIn) -> None:
        syncing.next_status = "FAILURE"
        client(syncing.url).resync_connection("c1", {"public": ["orders"]})
        poll_until(lambda: len(Receiver.bodies) == 2, "both webhooks")
        assert self.events()[-1] == ("sync_end", "FAILURE")
        assert client(syncing.url).connection("c1").failed_at is not None
        assert syncing.started[0][3] == "resync"

    def test_silent_runs_the_sync_but_sends_nothing(self, syncing: FivetranStandIn) -> None:
        syncing.silent = True
        client(syncing.url).sync_connection("c1")
        poll_until(lambda: client(syncing.url).connection("c1").succeeded_at, "the sync's end")
        assert Receiver.bodies == []

    def test_a_paused_or_unknown_connection_is_refused(self, syncing: FivetranStandIn) -> None:
        c = client(syncing.url)
        with pytest.raises(FivetranNotFound):
            c.sync_connection("nope")
        assert c.update_connection("c1", {"paused": True}).paused is True
        with pytest.raises(FivetranRejected, match="paused"):
            c.sync_connection("c1")
        assert syncing.started == []

    def test_a_resync_while_syncing_completes_that_sync_then_runs(
        self, syncing: FivetranStandIn
    ) -> None:
        """One request: the running sync ends SUCCESSFUL, the resync starts after it."""
        c = client(syncing.url)
        c.sync_connection("c1")
        c.resync_connection("c1", {"public": ["orders"]})
        poll_until(lambda: len(Receiver.bodies) == 4, "four webhooks")
        assert self.events() == [
            ("sync_start", ""),
            ("sync_end", "SUCCESSFUL"),
            ("sync_start", ""),
            ("sync_end", "SUCCESSFUL"),
        ]
        assert [s[3] for s in syncing.started] == ["sync", "resync"]
        assert syncing.calls["POST /v1/connections/{id}/resync"] == 1

    def test_a_resync_the_running_sync_blocks_is_a_409_not_retried(
        self, syncing: FivetranStandIn
    ) -> None:
        syncing.resync_conflict = True
        c = client(syncing.url)
        c.sync_connection("c1")
        with pytest.raises(FivetranRejected) as caught:
            c.resync_connection("c1")
        assert caught.value.status == 409
        assert syncing.calls["POST /v1/connections/{id}/resync"] == 1
        assert [s[3] for s in syncing.started] == ["sync"]

    @pytest.mark.parametrize("scope", [{}, {"public": []}, {"public": "orders"}, {"": ["t"]}])
    def test_an_empty_or_malformed_scope_is_refused_before_any_call(
        self, syncing: FivetranStandIn, scope: Any
    ) -> None:
        """Never "resync everything" for an empty scope: nothing is sent at all."""
        with pytest.raises(ValueError, match="resync scope"):
            client(syncing.url).resync_connection("c1", scope)
        assert syncing.total_calls == 0 and syncing.started == []

    def test_the_stand_in_answers_an_empty_scope_400_as_fivetran_does(
        self, syncing: FivetranStandIn
    ) -> None:
        bodies: list[dict[str, Any]] = [{"scope": {}}, {"scope": {"public": []}}]
        for body in bodies:
            with pytest.raises(FivetranRejected) as caught:
                client(syncing.url).request("POST", "/v1/connections/c1/resync", body=body)
            assert caught.value.status == 400
        assert syncing.started == []

    def test_a_rescheduled_sync_waits_for_a_request_on_a_manual_connection(
        self, syncing: FivetranStandIn
    ) -> None:
        syncing.next_status = "RESCHEDULED"
        c = client(syncing.url)
        c.sync_connection("c1")
        poll_until(lambda: c.connection("c1").sync_state == "rescheduled", "the reschedule")
        conn = c.connection("c1")
        assert conn.rescheduled_for is not None and conn.succeeded_at is conn.failed_at is None
        poll_until(lambda: len(Receiver.bodies) == 2, "both webhooks")
        assert Receiver.bodies[1]["data"]["rescheduledAt"] == conn.raw["status"]["rescheduled_for"]
        syncing.next_status = "SUCCESSFUL"
        c.sync_connection("c1")
        poll_until(lambda: c.connection("c1").succeeded_at, "the sync asked again")
        assert c.connection("c1").rescheduled_for is None

    def test_a_schedule_change_runs_no_setup_tests(self, syncing: FivetranStandIn) -> None:
        """PATCH runs setup tests unless run_setup_tests is false; ours never asks for them."""
        c = client(syncing.url)
        assert c.update_connection("c1", {"schedule_type": "auto"}).schedule_type == "auto"
        assert syncing.setup_tests == 0
        c.request("PATCH", "/v1/connections/c1", body={"schedule_type": "manual"})
        assert syncing.setup_tests == 1
        with pytest.raises(FivetranRejected, match="persistent"):
            c.request("PATCH", "/v1/connections/c1", body={"run_setup_tests": False})
