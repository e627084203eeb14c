"""POST /webhooks/fivetran: every status code, Fivetran's signature, the RQ job."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from freezegun import freeze_time
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rq import Queue

from fivetran_events import ConfigurationError, Settings, decide
from fivetran_events.keys import due_key, queue_name, sweep_wake_key
from fivetran_events.model import SIGNATURE_HEADER, sign
from fivetran_events.timeutil import to_ms
from testkit.support import (
    OTHER_SECRET,
    SECRET,
    WEBHOOK_PATH,
    answer,
    at,
    job_sync_id,
    payload,
    post_signed,
)
from webhook_app import create_app
from webhook_app.forwarding.lineage import FACET_SCHEMA_PATH, FACET_SCHEMA_URL
from webhook_app.forwarding.sweeper import FORWARD_JOB
from webhook_app.state import EXTENSION
from webhook_app.worker.build import build_forwarder
from webhook_app.worker.queue import forward_queue

URL = WEBHOOK_PATH


class TestSignature:
    def test_fivetran_signature_accepted(self, http: FlaskClient) -> None:
        """An upper-case hex HMAC of the raw body, as Fivetran sends it, is accepted."""
        r = post_signed(http, payload(created=at(3)))
        assert r.status_code == 200 and answer(r)["status"] == "recorded"

    def test_rotated_secret_accepted(self, http: FlaskClient) -> None:
        assert post_signed(http, payload(created=at(3)), secret=OTHER_SECRET).status_code == 200

    @pytest.mark.parametrize("header", [None, "", "00" * 32, "not-hex"])
    def test_missing_or_wrong_is_401_and_writes_nothing(
        self,
        http: FlaskClient,
        client: redis.Redis,
        header: str | None,
    ) -> None:
        raw = json.dumps(payload(created=at(3))).encode()
        headers = {} if header is None else {SIGNATURE_HEADER: header}
        r = http.post(URL, data=raw, headers=headers)
        assert r.status_code == 401 and "signature" in answer(r)["error"]
        assert client.keys("*") == []

    def test_signature_of_other_bytes_is_401(self, http: FlaskClient, client: redis.Redis) -> None:
        """Re-serialised JSON does not verify: the signature covers the raw bytes."""
        body = payload(created=at(3))
        sig = sign(json.dumps(body, indent=1).encode(), SECRET)
        r = http.post(URL, data=json.dumps(body).encode(), headers={SIGNATURE_HEADER: sig})
        assert r.status_code == 401
        assert client.keys("*") == []


#: A rotation pair whose new secret holds what the comma form cannot: a comma, spaces.
COMMA_SECRET = "new,secret with spaces and enough bytes "


class TestSecretForms:
    """FIVETRAN_EVENTS_WEBHOOK_SECRETS as the environment or a secret file gives it."""

    def _app(self, monkeypatch: pytest.MonkeyPatch, redis_url: str, **env: str) -> Flask:
        monkeypatch.setenv("FIVETRAN_EVENTS_REDIS_URL", redis_url)
        monkeypatch.setenv("FIVETRAN_EVENTS_KEY_PREFIX", "test:")
        monkeypatch.delenv("FIVETRAN_EVENTS_WEBHOOK_SECRETS", raising=False)
        monkeypatch.delenv("FIVETRAN_EVENTS_SECRETS_DIR", raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return create_app()

    def _verifies(self, app: Flask, secret: str, sync_id: str) -> bool:
        with app.test_client() as c:
            r = post_signed(c, payload(sync_id=sync_id, created=at(3)), secret=secret)
        assert r.status_code in (200, 401), r.data
        return bool(r.status_code == 200)

    def test_a_json_list_holds_a_comma(
        self, monkeypatch: pytest.MonkeyPatch, redis_url: str
    ) -> None:
        """A JSON list in the variable: each secret exactly, commas and spaces included."""
        value = json.dumps([SECRET, COMMA_SECRET])
        app = self._app(monkeypatch, redis_url, FIVETRAN_EVENTS_WEBHOOK_SECRETS=value)
        assert self._verifies(app, COMMA_SECRET, "s1") and self._verifies(app, SECRET, "s2")
        assert not self._verifies(app, "new", "s3")
        assert not self._verifies(app, COMMA_SECRET.strip(), "s4")

    def test_a_secret_file_holds_one_secret_a_line(
        self, monkeypatch: pytest.MonkeyPatch, redis_url: str, tmp_path: Path
    ) -> None:
        """A secret file of several lines: one secret a line, commas and inner spaces kept."""
        (tmp_path / "fivetran_events_webhook_secrets").write_text(f"{SECRET}\r\n\n{COMMA_SECRET}\n")
        app = self._app(monkeypatch, redis_url, FIVETRAN_EVENTS_SECRETS_DIR=str(tmp_path))
        assert self._verifies(app, COMMA_SECRET.strip(), "s1")
        assert self._verifies(app, SECRET, "s2")
        assert not self._verifies(app, "secret with spaces", "s3")

    @pytest.mark.parametrize("in_file", [False, True], ids=["variable", "file"])
    def test_the_comma_form_still_works(
        self, monkeypatch: pytest.MonkeyPatch, redis_url: str, tmp_path: Path, in_file: bool
    ) -> None:
        """One line of comma-separated secrets, each stripped, as before."""
        value = f" {SECRET} , {OTHER_SECRET}\n"
        if in_file:
            (tmp_path / "fivetran_events_webhook_secrets").write_text(value)
            app = self._app(monkeypatch, redis_url, FIVETRAN_EVENTS_SECRETS_DIR=str(tmp_path))
        else:
            app = self._app(monkeypatch, redis_url, FIVETRAN_EVENTS_WEBHOOK_SECRETS=value)
        assert self._verifies(app, SECRET, "s1") and self._verifies(app, OTHER_SECRET, "s2")

    def test_a_broken_json_list_is_refused_by_name(
        self, monkeypatch: pytest.MonkeyPatch, redis_url: str
    ) -> None:
        with pytest.raises(ConfigurationError, match=r"FIVETRAN_EVENTS_WEBHOOK_SECRETS.*JSON"):
            self._app(monkeypatch, redis_url, FIVETRAN_EVENTS_WEBHOOK_SECRETS='["a", 1]')


class TestEvents:
    def test_test_event(self, http: FlaskClient, client: redis.Redis) -> None:
        """Fivetran's test_event gets 200 (else it refuses to create the webhook), no sync."""
        body = {
            "event": "test_event",
            "created": "2026-05-22T00:06:08.638Z",
            "connector_type": "_connector_type",
            "connector_id": "_connector_1",
            "group_id": "_destination_1",
        }
        r = post_signed(http, body)
        assert r.status_code == 200 and answer(r)["status"] == "ignored"
        assert [k for k in client.keys("*") if b":h:" in k] == []

    def test_unknown_event_ignored(self, http: FlaskClient, client: redis.Redis) -> None:
        r = post_signed(http, {"event": "transformation_run_succeeded", "created": "x"})
        assert r.status_code == 200 and answer(r)["status"] == "ignored"
        assert client.keys("*") == []

    @pytest.mark.parametrize("event", ["resync_connector", "resync_table"])
    def test_resync_recorded(self, http: FlaskClient, client: redis.Redis, event: str) -> None:
        r = post_signed(http, payload(event, created=at(3), tables=["t1"]))
        assert answer(r)["status"] == "recorded"
        assert client.zcard("test:h:assimilate_seem:resyncs") == 1

    @pytest.mark.parametrize(
        "status", ["SUCCESSFUL", "FAILURE", "FAILURE_WITH_TASK", "FAILED", "RESCHEDULED"]
    )
    def test_every_status_recorded(self, http: FlaskClient, status: str) -> None:
        assert post_signed(http, payload(status=status, created=at(3))).json["status"] == "recorded"

    def test_duplicate(self, http: FlaskClient) -> None:
        body = payload(created=at(3))
        assert post_signed(http, body).json["status"] == "recorded"
        assert post_signed(http, body).json["status"] == "duplicate"


class TestForwardingJob:
    def test_success_enqueues_one_job(
        self, http: FlaskClient, app: Flask, client: redis.Redis
    ) -> None:
        """A successful sync_end leaves exactly one forwarding job, also after redelivery:
        the webhook makes its delivery due and wakes the sweepers, a sweep queues it."""
        body = payload(sync_id="s1", created=at(3))
        post_signed(http, body)
        post_signed(http, body)
        q = forward_queue(app.extensions[EXTENSION].settings, client)
        assert q.count == 0
        assert client.lrange(sweep_wake_key("test:"), 0, -1) == [b"1"]
        assert build_forwarder(app.extensions[EXTENSION].settings, with_airflow=False).sweep() == 1
        assert q.count == 1
        job = q.fetch_job(q.job_ids[0])
        assert job is not None
        assert job.func_name == FORWARD_JOB
        assert job_sync_id(client, job) == "s1"

    @pytest.mark.parametrize("status", ["FAILED", "RESCHEDULED"])
    def test_failure_enqueues_nothing(
        self, http: FlaskClient, client: redis.Redis, status: str
    ) -> None:
        post_signed(http, payload(status=status, created=at(3)))
        assert not client.exists(sweep_wake_key("test:"), due_key("test:"))
        assert Queue(queue_name("test:"), connection=client).count == 0


class TestClientErrors:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            (b"{not json", "body"),
            (json.dumps({"event": "sync_end"}).encode(), "created"),
            (json.dumps({**payload(), "data": {}}).encode(), "data.status"),
        ],
    )
    def test_400_names_the_field(
        self,
        http: FlaskClient,
        client: redis.Redis,
        body: bytes,
        field: str,
    ) -> None:
        r = post_signed(http, body)
        assert r.status_code == 400 and answer(r)["field"] == field
        assert client.keys("*") == []

    def test_413_too_large(self, http: FlaskClient, client: redis.Redis) -> None:
        body = json.dumps({**payload(), "pad": "x" * 70_000}).encode()
        r = post_signed(http, body)
        assert r.status_code == 413 and "larger" in answer(r)["error"]
        assert client.keys("*") == []

    def test_405_and_404_are_json(self, http: FlaskClient) -> None:
        assert http.get(URL).status_code == 405
        r = http.get("/nowhere")
        assert r.status_code == 404 and answer(r)["status"] == "error"

    @pytest.mark.parametrize(
        ("method", "path", "allowed"),
        [
            ("GET", URL, {"POST", "OPTIONS"}),
            ("PUT", URL, {"POST", "OPTIONS"}),
            ("DELETE", "/api/connectors", {"GET", "HEAD", "OPTIONS"}),
            ("POST", "/api/connectors/assimilate_seem/syncs", {"GET", "HEAD", "OPTIONS"}),
            ("PATCH", "/api/openapi.json", {"GET", "HEAD", "OPTIONS"}),
            ("POST", "/healthz", {"GET", "HEAD", "OPTIONS"}),
            ("DELETE", "/metrics", {"GET", "HEAD", "OPTIONS"}),
            ("PUT", FACET_SCHEMA_PATH, {"GET", "HEAD", "OPTIONS"}),
        ],
    )
    def test_405_says_which_methods_are_allowed(
        self, http: FlaskClient, method: str, path: str, allowed: set[str]
    ) -> None:
        """RFC 9110: a 405 carries Allow, also in the app's JSON error body's answer."""
        r = http.open(path, method=method)
        assert r.status_code == 405 and answer(r)["status"] == "error"
        assert {m.strip() for m in r.headers["Allow"].split(",")} == allowed


class TestRequestId:
    @pytest.mark.parametrize("given", ["req-1\n", "req-1\r\n", "req 1"])
    def test_a_request_id_that_is_not_one_is_replaced(self, http: FlaskClient, given: str) -> None:
        """An X-Request-Id with a trailing newline (a WSGI server passing it through) is
        not an id: the request gets a fresh one, never a 500 or a newline in a log line."""
        r = http.get("/healthz", environ_overrides={"HTTP_X_REQUEST_ID": given})
        assert r.status_code == 200, r.data
        rid = r.headers["X-Request-Id"]
        assert rid != given and len(rid) == 32 and rid.isalnum()


class TestSchemas:
    """The OpenLineage facet's JSON schema, served for its ``_schemaURL``."""

    def test_the_facets_schema_is_served_without_a_token(self, http: FlaskClient) -> None:
        """Public documentation (the test client sends no Authorization), as JSON Schema."""
        r = http.get(FACET_SCHEMA_PATH)
        assert r.status_code == 200 and r.mimetype == "application/schema+json"
        schema = answer(r)
        assert schema["$id"] == FACET_SCHEMA_URL.split("#")[0]
        assert "FivetranSyncRunFacet" in schema["$defs"]
        head = http.head(FACET_SCHEMA_PATH)
        assert head.status_code == 200 and head.data == b""

    @pytest.mark.parametrize(
        "path",
        [
            "/schemas/FivetranSyncRunFacet-9-9-9.json",
            "/schemas/..%2F__init__.py",
            "/schemas/%2e%2e%2fwebhook.py",
            "/schemas/..",
            "/schemas/",
        ],
    )
    @pytest.mark.parametrize("method", ["GET", "HEAD"])
    def test_an_unknown_schema_is_404(self, http: FlaskClient, path: str, method: str) -> None:
        """Never a 500, and nothing outside the schemas' folder."""
        assert http.open(path, method=method).status_code == 404


class TestUnavailable:
    def test_redis_down_is_503_with_retry_after(self, settings: Settings) -> None:
        """Fivetran retries a 503; Retry-After tells it when."""
        down = settings.model_copy(
            update={"redis_url": "redis://127.0.0.1:1/0", "redis_timeout_seconds": 0.5}
        )
        app = create_app(down)
        with app.test_client() as c:
            r = post_signed(c, payload(created=at(3)))
            assert r.status_code == 503 and r.headers["Retry-After"] == "30"
            assert c.get("/readyz").status_code == 503
            assert c.get("/healthz").status_code == 200

    def test_readyz_does_not_show_redis_address(self, settings: Settings) -> None:
        """/readyz may be reachable by more people than Redis should be known to."""
        down = settings.model_copy(
            update={"redis_url": "redis://127.0.0.1:1/0", "redis_timeout_seconds": 0.5}
        )
        r = create_app(down).test_client().get("/readyz")
        assert r.status_code == 503 and r.headers["Retry-After"] == "30"
        assert "127.0.0.1" not in r.get_data(as_text=True), r.json

    def test_refuses_to_start_without_secret(self, settings: Settings) -> None:
        from fivetran_events import ConfigurationError

        with pytest.raises(ConfigurationError, match="WEBHOOK_SECRETS"):
            create_app(settings.model_copy(update={"webhook_secrets": []}))


class TestHostileInput:
    @settings(
        max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        body=st.one_of(
            st.binary(max_size=2000),
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                lambda c: st.lists(c) | st.dictionaries(st.text(), c),
                max_leaves=20,
            ).map(lambda v: json.dumps(v).encode()),
            st.fixed_dictionaries(
                {
                    "event": st.sampled_from(
                        ["sync_end", "sync_start", "resync_table", "test_event"]
                    )
                },
                optional={
                    "created": st.text() | st.integers(),
                    "connector_id": st.text() | st.integers(),
                    "sync_id": st.text() | st.none(),
                    "data": st.dictionaries(st.text(), st.text()) | st.integers(),
                },
            ).map(lambda v: json.dumps(v).encode()),
        ),
        sign_it=st.booleans(),
        junk_headers=st.dictionaries(
            st.sampled_from(
                ["Content-Type", "Content-Encoding", "X-Forwarded-For", SIGNATURE_HEADER]
            ),
            st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=50),
            max_size=3,
        ),
    )
    def test_never_500_and_refusals_write_nothing(
        self,
        http: FlaskClient,
        client: redis.Redis,
        body: bytes,
        sign_it: bool,
        junk_headers: dict[str, str],
    ) -> None:
        client.flushdb()
        headers = dict(junk_headers)
        if sign_it:
            headers[SIGNATURE_HEADER] = sign(body, SECRET)
        r = http.post(URL, data=body, headers=headers)
        assert r.status_code in (200, 400, 401, 413), r.data
        assert r.is_json
        if r.status_code != 200 or answer(r)["status"] != "recorded":
            assert [k for k in client.keys("*") if b":h:" in k or b"rq:" in k] == []


class TestMetrics:
    def test_outcomes_and_latency_exported(self, http: FlaskClient) -> None:
        """/metrics counts deliveries by outcome and observes their latency."""

        def count(text: str, outcome: str) -> float:
            key = f'fivetran_events_webhook_deliveries_total{{outcome="{outcome}"}}'
            return next(
                (float(line.split()[-1]) for line in text.splitlines() if line.startswith(key)), 0.0
            )

        before = http.get("/metrics").get_data(as_text=True)
        body = payload(created=at(3))
        post_signed(http, body)
        post_signed(http, body)
        http.post(URL, data=b"{}")
        after = http.get("/metrics").get_data(as_text=True)
        for outcome in ("recorded", "duplicate", "unauthorized"):
            assert count(after, outcome) == count(before, outcome) + 1
        assert "fivetran_events_webhook_seconds_bucket" in after


class TestClockSkew:
    """``created`` ahead of the server's clock: 400 naming it, nothing recorded."""

    NOW = at(3)

    def test_beyond_the_default_skew_is_400(self, http: FlaskClient, client: redis.Redis) -> None:
        """One millisecond over an hour ahead is refused; exactly an hour is accepted."""
        with freeze_time(self.NOW):
            r = post_signed(http, payload(created=self.NOW + timedelta(hours=1, milliseconds=1)))
            assert r.status_code == 400 and answer(r)["field"] == "created"
            assert "ahead of the server's clock" in answer(r)["error"]
            assert client.keys("*") == []
            r = post_signed(http, payload(created=self.NOW + timedelta(hours=1)))
            assert r.status_code == 200 and answer(r)["status"] == "recorded"

    def test_a_success_from_2999_changes_no_decision(
        self,
        http: FlaskClient,
        client: redis.Redis,
        app: Flask,
    ) -> None:
        """The signed success dated 2999 is refused, so a later target still waits."""
        with freeze_time(self.NOW):
            r = post_signed(http, payload(created="2999-01-01T00:00:00.000Z", sync_id="future"))
            assert r.status_code == 400 and answer(r)["field"] == "created"
            assert client.keys("*") == []
            facts = app.extensions[EXTENSION].reader.facts("assimilate_seem", to_ms(at(10)))
        assert decide(facts).outcome.value == "wait"

    def test_the_setting_sets_the_bound(self, settings: Settings) -> None:
        """FIVETRAN_EVENTS_MAX_CLOCK_SKEW_SECONDS reaches the check."""
        app = create_app(settings.model_copy(update={"max_clock_skew_seconds": 60}))
        with freeze_time(self.NOW), app.test_client() as http:
            assert (
                post_signed(http, payload(created=self.NOW + timedelta(seconds=61))).status_code
                == 400
            )
            assert (
                post_signed(http, payload(created=self.NOW + timedelta(seconds=60))).status_code
                == 200
            )


class TestUnstorableText:
    @pytest.mark.parametrize("name", ["resync_table", "resync_connector", "edit_connector"])
    def test_a_sample_delivery_marks_no_table_list_stale(
        self, http: FlaskClient, client: redis.Redis, name: str
    ) -> None:
        """A sample delivery (a ``created`` that is no time) of an event that makes the
        table list stale is taken as ignored and touches nothing, even with a connector
        id Redis cannot take (the fuzz test found it a 500)."""
        body = payload(name, "\ud800")
        body["created"] = "yesterday"
        r = post_signed(http, body)
        assert r.status_code == 200 and answer(r)["status"] == "ignored", r.json
        assert client.keys("test:*") == []

    def test_lone_surrogate_in_tables_is_dropped(
        self, http: FlaskClient, client: redis.Redis
    ) -> None:
        """JSON may escape a lone surrogate; Redis cannot store it (it was a 500): the
        optional table list is left out, the resync recorded (test_fivetran_as_it_is.py)."""
        body = payload("resync_table", created=at(3), tables=["orders", "\ud800"])
        r = post_signed(http, body)
        assert r.status_code == 200 and answer(r)["dropped_fields"] == ["data.tables"], r.json
        members = client.zrange("test:h:assimilate_seem:resyncs", 0, -1)
        assert len(members) == 1 and b"tables" not in members[0]
