"""The read API's contract: /api/openapi.json is valid OpenAPI, generated from the models
that validate the queries, and the live app keeps to it: for generated requests, and for
every answer over generated histories that leave connectors in every state."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
import redis
import schemathesis
from flask.testing import FlaskClient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from fivetran_events.timeutil import iso
from testkit.support import TOKEN, answer, deliver, payload
from webhook_app.api import DecisionQuery, SyncsQuery

from .histories import CONNECTORS, NEVER_SEEN, SEEDED, every_state, histories

CID = "assimilate_seem"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CONNECTORS_ROUTE = "/api/connectors"
SYNCS_ROUTE = "/api/connectors/{connector_id}/syncs"
DECISION_ROUTE = "/api/connectors/{connector_id}/decision"
#: What the contract promises: no 5xx, a documented status, a declared content type and a
#: body matching the documented schema. (Not that every schema-valid string is accepted:
#: the document types timestamps as strings, and "not a time" is a documented 400.)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
#: Every combination of the decision's flags and criteria.
DECISION_FLAGS = [
    {
        "propagate_failures_forward": propagate,
        "always_wait_when_syncing": always_wait,
        "wait_when_paused": wait_paused,
        "criterion": criterion,
    }
    for propagate, always_wait, wait_paused, criterion in itertools.product(
        ("true", "false"), ("true", "false"), ("true", "false"), ("ended_after", "started_after")
    )
]


class Contract:
    """The served /api/openapi.json as the judge of each answer of the read API.

    Independent of Schemathesis: openapi-schema-validator's OpenAPI 3.1 dialect (JSON
    Schema 2020-12) resolving the document's own ``$ref``s, against the schema the route
    documents for the status it answered.
    """

    URI = "urn:fivetran-events:openapi"

    def __init__(self, http: FlaskClient) -> None:
        self.http = http
        self.document: dict[str, Any] = answer(http.get("/api/openapi.json"))
        resource = Resource.from_contents(self.document, default_specification=DRAFT202012)
        self._registry = Registry().with_resource(self.URI, resource)
        self._validators: dict[tuple[str, int], OAS31Validator] = {}

    def get(self, route: str, connector_id: str = "", **query: str) -> tuple[int, dict[str, Any]]:
        """GET ``route`` for ``connector_id``; fail unless the answer keeps the contract.

        Return the answer's status and JSON body.
        """
        path = route.replace("{connector_id}", quote(connector_id, safe=""))
        resp = self.http.get(path, headers=AUTH, query_string=query)
        where = f"GET {path} {query}: {resp.status_code} {resp.get_data(as_text=True)[:800]}"
        assert resp.status_code < 500, where
        documented = self.document["paths"][route]["get"]["responses"]
        assert str(resp.status_code) in documented, f"undocumented status: {where}"
        assert resp.mimetype == "application/json", where
        body = answer(resp)
        errors = list(self._validator(route, resp.status_code).iter_errors(body))
        assert not errors, f"{where}\n" + "\n".join(
            f"  at {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors
        )
        return resp.status_code, body

    def _validator(self, route: str, status: int) -> OAS31Validator:
        key = (route, status)
        if key not in self._validators:
            pointer = "/".join(
                part.replace("~", "~0").replace("/", "~1")
                for part in ("paths", route, "get", "responses", str(status), "content")
            )
            ref = f"{self.URI}#/{pointer}/application~1json/schema"
            self._validators[key] = OAS31Validator({"$ref": ref}, registry=self._registry)
        return self._validators[key]


@pytest.fixture
def contract(http: FlaskClient) -> Contract:
    return Contract(http)


def record_every_state(http: FlaskClient) -> datetime:
    """Deliver ``histories.every_state`` signed; return the ``now`` it was written for."""
    now = datetime.now(timezone.utc)
    for body in every_state(now):
        deliver(http, body)
    return now


class TestDocument:
    def test_served_without_a_token_and_valid(self, http: FlaskClient) -> None:
        """The document holds no data, so it needs no token; openapi-spec-validator accepts it."""
        resp = http.get("/api/openapi.json")
        assert resp.status_code == 200
        validate(answer(resp))

    def test_generated_from_the_query_models(self, http: FlaskClient) -> None:
        """Each route's query parameters are exactly its model's fields."""
        paths = answer(http.get("/api/openapi.json"))["paths"]
        assert set(paths) == {CONNECTORS_ROUTE, SYNCS_ROUTE, DECISION_ROUTE}
        for path, model in ((SYNCS_ROUTE, SyncsQuery), (DECISION_ROUTE, DecisionQuery)):
            params = paths[path]["get"]["parameters"]
            query = {p["name"] for p in params if p["in"] == "query"}
            assert query == set(model.model_fields)
            assert set(paths[path]["get"]["responses"]) >= {"200", "400", "401", "404"}

    def test_a_bad_parameter_is_the_apis_400_naming_it(self, http: FlaskClient) -> None:
        record_every_state(http)
        r = http.get(f"/api/connectors/{CID}/decision?target=2026-01-04&criterion=x", headers=AUTH)
        assert r.status_code == 400 and answer(r)["field"] == "criterion"
        assert answer(r)["status"] == "error" and "criterion" in answer(r)["error"]


class TestRunningSync:
    def test_the_running_sync_decides_wait_with_no_end(
        self, http: FlaskClient, contract: Contract
    ) -> None:
        """Issue #20: with always_wait_when_syncing, a running sync decides WAIT and is the
        answer's sync, with ended_at null; the answer's model once required an end, so the
        API answered 500."""
        started = datetime.now(timezone.utc)
        deliver(http, payload("sync_start", sync_id="running-1", created=started))
        status, body = contract.get(
            DECISION_ROUTE,
            CID,
            target=iso(started - timedelta(hours=1)) or "",
            always_wait_when_syncing="true",
        )
        assert status == 200 and body["decision"] == "wait"
        assert body["sync"]["sync_id"] == "running-1"
        assert body["sync"]["status"] == "RUNNING" and body["sync"]["ended_at"] is None


def check_syncs_say_what_they_are(body: Any) -> None:
    """Every sync object in ``body`` marks a derived id, and only a running one lacks an end."""
    if isinstance(body, list):
        for item in body:
            check_syncs_say_what_they_are(item)
    elif isinstance(body, dict):
        if "sync_id" in body:
            assert body["sync_id_derived"] is body["sync_id"].startswith("~"), body
            if "ended_at" in body and body["ended_at"] is None:
                assert body["status"] in ("RUNNING", "STALE"), body
        for value in body.values():
            check_syncs_say_what_they_are(value)


class TestGeneratedHistories:
    @settings(
        max_examples=80,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )
    @given(data=st.data())
    def test_every_answer_keeps_the_contract(
        self, http: FlaskClient, client: redis.Redis, contract: Contract, data: st.DataObject
    ) -> None:
        """Over generated histories (every status, RESCHEDULED with and without its time,
        derived ids, running and stale syncs, paused, deleted and broken connectors), every
        route answers a documented status with a body matching its schema: the listing,
        syncs in windows, and the decision under every combination of its flags.
        (``--hypothesis-show-statistics`` shows which decisions and states were reached.)"""
        client.flushdb()
        now = datetime.now(timezone.utc)
        bodies = data.draw(histories(now), label="history")
        for body in bodies:
            deliver(http, body)
        status, listed = contract.get(CONNECTORS_ROUTE)
        assert status == 200
        check_syncs_say_what_they_are(listed)
        known = {c["connector_id"] for c in listed["connectors"]}
        assert known <= set(CONNECTORS)
        running = {c["connector_id"] for c in listed["connectors"] if c["running"]}
        for c in listed["connectors"]:
            event(f"connector {c['lifecycle']['state']}, {'running' if c['running'] else 'idle'}")
        times = sorted({body["created"] for body in bodies})
        moments = st.sampled_from(times) | st.integers(-9 * 86400, 86400).map(
            lambda s: iso(now + timedelta(seconds=s)) or ""
        )
        windows = st.sampled_from([{}, {"limit": "1"}]) | st.fixed_dictionaries(
            {}, optional={"since": moments, "until": moments, "limit": st.just("2")}
        )
        for cid in CONNECTORS:
            expected = 200 if cid in known else 404
            for _ in range(2):
                window = data.draw(windows, label=f"{cid} syncs window")
                status, syncs = contract.get(SYNCS_ROUTE, cid, **window)
                backwards = window.get("since", "") > window.get("until", "~")  # both iso()
                assert status == (400 if backwards and cid in known else expected), syncs
                check_syncs_say_what_they_are(syncs)
            target = data.draw(moments, label=f"{cid} target")
            for flags in DECISION_FLAGS:
                status, decision = contract.get(DECISION_ROUTE, cid, target=target, **flags)
                assert status == expected, (cid, decision)
                check_syncs_say_what_they_are(decision)
                if status == 200:
                    sync = decision["sync"] or {}
                    event(f"decision {decision['decision']} by {sync.get('status', 'no sync')}")
                    if flags["always_wait_when_syncing"] == "true" and cid in running:
                        assert decision["decision"] == "wait", decision  # issue #20
                        assert decision["sync"]["ended_at"] is None, decision
                    if decision["recheck_at"] is not None:
                        assert decision["decision"] == "wait", decision
                        event("decision wait with recheck_at")
        for route in (SYNCS_ROUTE, DECISION_ROUTE):
            status, _ = contract.get(route, NEVER_SEEN, target=times[0])
            assert status == 404


class TestEveryState:
    def test_the_seed_leaves_each_connector_in_its_state(
        self, http: FlaskClient, contract: Contract
    ) -> None:
        """``every_state`` holds what the Schemathesis test relies on: a running sync, a
        RESCHEDULED wait with and without its time, a failure, a paused and a deleted
        connector, derived ids; and each of those answers keeps the contract."""
        now = record_every_state(http)
        ok, failed, paused, deleted, derived = SEEDED
        listed = {c["connector_id"]: c for c in contract.get(CONNECTORS_ROUTE)[1]["connectors"]}
        assert set(listed) == set(SEEDED)
        assert listed[ok]["running"]["sync_id"] == "ok-6"
        assert listed[paused]["lifecycle"]["state"] == "paused"
        assert listed[deleted]["lifecycle"]["state"] == "deleted"
        assert listed[deleted]["lifecycle"]["setup"] == "broken"
        assert listed[derived]["lifecycle"]["setup"] == "connected"
        assert listed[derived]["running"]["sync_id_derived"] is True

        def decide(cid: str, hours_ago: float, **flags: str) -> dict[str, Any]:
            target = iso(now - timedelta(hours=hours_ago)) or ""
            status, body = contract.get(DECISION_ROUTE, cid, target=target, **flags)
            assert status == 200
            return body

        running = decide(ok, 12, always_wait_when_syncing="true")
        assert running["decision"] == "wait" and running["sync"]["ended_at"] is None
        rescheduled = decide(ok, 12)
        assert rescheduled["decision"] == "wait" and rescheduled["recheck_at"] is not None
        assert decide(failed, 12)["sync"]["status"] == "RESCHEDULED"
        assert decide(failed, 12)["recheck_at"] is None
        assert decide(failed, 80)["sync"]["status"] == "FAILED"
        assert decide(paused, 12)["decision"] == "fail"
        assert decide(paused, 12, wait_when_paused="true")["decision"] == "wait"
        assert decide(deleted, 12)["decision"] == "fail"
        assert decide(derived, 60)["sync"]["sync_id_derived"] is True
        _, syncs = contract.get(SYNCS_ROUTE, ok)
        statuses = {s["status"] for s in syncs["syncs"]}
        assert {"RUNNING", "CANCELED", "PAUSED_BY_SYSTEM", "FAILURE_WITH_TASK"} <= statuses
        _, syncs = contract.get(SYNCS_ROUTE, failed)
        assert "STALE" in {s["status"] for s in syncs["syncs"]}


def test_every_generated_request_keeps_the_contract(app: Any, http: FlaskClient) -> None:
    """Documented status, a body matching its schema, never a 500, for Schemathesis'
    generated requests to each operation; two in three of them name a connector of
    ``histories.every_state`` (running, failed, paused, deleted, derived ids), so 200
    bodies of every state are checked too. Bounded: 40 examples an operation, derandomized."""
    record_every_state(http)
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) == 3
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=40,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def keeps_contract(case: Any) -> None:
            params = case.path_parameters or {}
            n = len(str(params.get("connector_id", "")))
            if "connector_id" in params and n % 3:
                params["connector_id"] = SEEDED[n % len(SEEDED)]
            case.call_and_validate(headers=AUTH, checks=CHECKS)

        keeps_contract()
