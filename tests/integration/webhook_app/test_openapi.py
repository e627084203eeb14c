"""The read API's contract: /api/openapi.json is valid OpenAPI, generated from the models
that validate the queries, and the live app keeps to it for generated requests."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from openapi_spec_validator import validate
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from testkit.support import TOKEN, at, payload, signed
from webhook_app.openapi import DecisionQuery, SyncsQuery

CID = "assimilate_seem"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: What the contract promises: no 5xx, a documented status, a declared content type and a
#: body matching the documented schema. (Not that every schema-valid string is accepted:
#: the document types timestamps as strings, and "not a time" is a documented 400.)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def record_history(http: Any) -> None:
    for day, status in ((3, "SUCCESSFUL"), (5, "FAILURE")):
        raw, headers = signed(payload(created=at(day), status=status))
        assert http.post("/webhooks/fivetran", data=raw, headers=headers).status_code == 200
    raw, headers = signed(payload("sync_start", created=at(6)))
    assert http.post("/webhooks/fivetran", data=raw, headers=headers).status_code == 200


class TestDocument:
    def test_served_without_a_token_and_valid(self, http: Any) -> None:
        """The document holds no data, so it needs no token; openapi-spec-validator accepts it."""
        resp = http.get("/api/openapi.json")
        assert resp.status_code == 200
        validate(resp.json)

    def test_generated_from_the_query_models(self, http: Any) -> None:
        """Each route's query parameters are exactly its model's fields."""
        paths = http.get("/api/openapi.json").json["paths"]
        assert set(paths) == {
            "/api/connectors",
            "/api/connectors/{connector_id}/syncs",
            "/api/connectors/{connector_id}/decision",
        }
        for path, model in (("syncs", SyncsQuery), ("decision", DecisionQuery)):
            params = paths[f"/api/connectors/{{connector_id}}/{path}"]["get"]["parameters"]
            query = {p["name"] for p in params if p["in"] == "query"}
            assert query == set(model.model_fields)
            assert set(paths[f"/api/connectors/{{connector_id}}/{path}"]["get"]["responses"]) >= {
                "200",
                "400",
                "401",
                "404",
            }

    def test_a_bad_parameter_is_the_apis_400_naming_it(self, http: Any) -> None:
        record_history(http)
        r = http.get(f"/api/connectors/{CID}/decision?target=2026-01-04&criterion=x", headers=AUTH)
        assert r.status_code == 400 and r.json["field"] == "criterion"
        assert r.json["status"] == "error" and "criterion" in r.json["error"]


def test_every_generated_request_keeps_the_contract(app: Any, http: Any) -> None:
    """Documented status, a body matching its schema, never a 500, for Schemathesis'
    generated requests to each operation; half of them name a connector with history, so
    200 bodies are checked too. Bounded: 40 examples an operation, derandomized."""
    record_history(http)
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
            if "connector_id" in params and len(str(params["connector_id"])) % 2 == 0:
                params["connector_id"] = CID
            case.call_and_validate(headers=AUTH, checks=CHECKS)

        keeps_contract()
