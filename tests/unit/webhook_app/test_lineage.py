"""OpenLineage: transitions, run ids, job names, the events built, and their validity."""

from __future__ import annotations

import json
import logging
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from openlineage.client.serde import Serde

from fivetran_events import ConfigurationError, Settings, load_settings
from fivetran_events.deliveries import Delivery
from fivetran_events.model import SOURCE_IMPORTED, SOURCE_RECONCILED, EventKind
from testkit.openlineage_receiver import LineageReceiver, schema_errors
from testkit.support import ev
from webhook_app.forwarding.enqueue import event_type, lineage_enabled, lineage_targets
from webhook_app.forwarding.lineage import (
    FACET_SCHEMA_PATH,
    FACET_SCHEMA_URL,
    PRODUCER,
    LineageSender,
    build_event,
    facet_schema_url,
    job_namespace,
    no_outputs,
    run_id,
    table_outputs,
    target_type,
)

SETTINGS = Settings()


def record(target: str, status: str = "SUCCESSFUL", **fields: str) -> Delivery:
    """A lineage delivery's record, as the webhook's script writes it."""
    base = {
        "connector_id": "assimilate_seem",
        "sync_id": "b4703f73-6315-4e22-8d7a-3bfb18b2fed2",
        "uri": target,
        "connector_name": "ftar_pg",
        "connector_type": "google_cloud_postgresql",
        "group_id": "inappropriate_implode",
        "status": status,
        "ended_ms": "1779408368638",
        "received_ms": "1779408368700",
    }
    return Delivery("assimilate_seem:b4703f73:x", {**base, **fields})


def as_json(d: Delivery, outputs: Any = no_outputs) -> dict[str, Any]:
    """The event of ``d`` as the client puts it on the wire."""
    return json.loads(Serde.to_json(build_event(d, SETTINGS.lineage_namespace, outputs)))  # type: ignore[no-any-return]


class TestTransitions:
    @pytest.mark.parametrize(
        ("status", "expected"),
        [
            ("SUCCESSFUL", "COMPLETE"),
            ("FAILURE", "FAIL"),
            ("FAILURE_WITH_TASK", "FAIL"),
            ("FAILED", "FAIL"),
            ("CANCELED", "ABORT"),
            ("RESCHEDULED", "OTHER"),
            ("SOMETHING_NEW", "OTHER"),
        ],
    )
    def test_sync_end_status_maps_to_run_state(self, status: str, expected: str) -> None:
        """Success completes, failures fail, a cancel aborts, the rest leaves the run open."""
        assert event_type(EventKind.SYNC_END, status) == expected

    def test_sync_start_is_start(self) -> None:
        assert lineage_targets(ev("sync_start", sync_id="s")) == ["openlineage:START"]

    def test_end_targets_name_their_type(self) -> None:
        """One delivery per transition; an OTHER keeps its status so two differ."""
        assert lineage_targets(ev(sync_id="s")) == ["openlineage:COMPLETE"]
        assert lineage_targets(ev(sync_id="s", status="FAILURE")) == ["openlineage:FAIL"]
        assert lineage_targets(ev(sync_id="s", status="RESCHEDULED")) == [
            "openlineage:OTHER:RESCHEDULED"
        ]
        assert target_type("openlineage:OTHER:RESCHEDULED") == "OTHER"

    def test_other_events_and_the_past_send_nothing(self) -> None:
        """Lifecycle events, test events and an import of the LOG table's past make no runs."""
        assert lineage_targets(ev("pause_connector")) == []
        assert lineage_targets(ev("test_event")) == []
        imported = ev(sync_id="s")
        object.__setattr__(imported, "source", SOURCE_IMPORTED)
        assert lineage_targets(imported) == []
        reconciled = ev(sync_id="s")
        object.__setattr__(reconciled, "source", SOURCE_RECONCILED)
        assert lineage_targets(reconciled) == ["openlineage:COMPLETE"]

    def test_targets_are_never_dataset_uris(self) -> None:
        """No target has the "//" every dataset URI has: a sync's lineage and dataset
        deliveries never share an id."""
        for e in (ev("sync_start", sync_id="s"), ev(sync_id="s", status="RESCHEDULED")):
            assert lineage_targets(e) and all("//" not in t for t in lineage_targets(e))


class TestRunId:
    def test_deterministic_uuid5_of_connector_and_sync(self) -> None:
        """START and COMPLETE, built by any worker at any time, share one run id."""
        a = run_id("c1", "s1")
        assert a == run_id("c1", "s1")
        assert uuid.UUID(a).version == 5
        assert a != run_id("c1", "s2")
        assert a != run_id("c2", "s1")

    def test_start_and_end_events_share_it(self) -> None:
        start = as_json(record("openlineage:START", status=""))
        end = as_json(record("openlineage:COMPLETE"))
        assert start["run"]["runId"] == end["run"]["runId"]
        assert start["job"] == end["job"]


class TestJob:
    def test_namespace_is_the_destination_group_and_name_the_connector(self) -> None:
        event = as_json(record("openlineage:COMPLETE"))
        assert event["job"]["namespace"] == "fivetran://inappropriate_implode"
        assert event["job"]["name"] == "assimilate_seem"
        assert event["job"]["facets"]["jobType"]["integration"] == "FIVETRAN"

    def test_unknown_group_falls_back(self) -> None:
        assert job_namespace("fivetran://{group_id}", "c", "") == "fivetran://default"

    def test_template_with_unknown_field_is_refused(self) -> None:
        with pytest.raises(ConfigurationError, match="LINEAGE_NAMESPACE"):
            load_settings(lineage_namespace="fivetran://{account}")


class TestEvent:
    @pytest.mark.parametrize(
        ("target", "status"),
        [
            ("openlineage:START", ""),
            ("openlineage:COMPLETE", "SUCCESSFUL"),
            ("openlineage:FAIL", "FAILURE"),
            ("openlineage:ABORT", "CANCELED"),
            ("openlineage:OTHER:RESCHEDULED", "RESCHEDULED"),
        ],
    )
    def test_every_event_is_valid_openlineage(self, target: str, status: str) -> None:
        """Each type validates against the spec's RunEvent and each facet's schema."""
        event = as_json(record(target, status=status))
        assert schema_errors(event) == []
        assert event["eventType"] == target_type(target)
        assert event["producer"] == PRODUCER

    def test_facet_carries_connector_type_sync_id_and_status(self) -> None:
        facet = as_json(record("openlineage:FAIL", status="FAILURE"))["run"]["facets"][
            "fivetran_sync"
        ]
        assert facet["connectorType"] == "google_cloud_postgresql"
        assert facet["syncId"] == "b4703f73-6315-4e22-8d7a-3bfb18b2fed2"
        assert facet["status"] == "FAILURE"
        assert facet["_producer"] == PRODUCER
        assert facet["_schemaURL"].startswith("urn:fivetran-events:schema:FivetranSyncRunFacet")

    def test_details_from_the_history_go_in_the_facet(self) -> None:
        """A failure's reason and task type and the sync's start, valid against our schema."""
        details = {
            "startedAt": "2026-05-22T00:01:00.000Z",
            "failureReason": "permission denied",
            "taskType": "reconnect",
        }
        d = record("openlineage:FAIL", status="FAILURE_WITH_TASK")
        event = json.loads(Serde.to_json(build_event(d, "fivetran://{group_id}", details=details)))
        assert schema_errors(event) == []
        facet = event["run"]["facets"]["fivetran_sync"]
        assert {k: facet[k] for k in details} == details
        event["run"]["facets"]["fivetran_sync"]["startedAt"] = "yesterday"
        assert any("startedAt" in e for e in schema_errors(event))

    def test_an_end_after_the_run_ended_is_a_child_run(self) -> None:
        """With ``parentRunId`` (an earlier end of the sync closed its run) the end is a
        run of its own, deterministic, whose parent facet (the spec's ParentRunFacet)
        names the sync's run and job; valid against the vendored schemas."""
        d = record("openlineage:COMPLETE")
        base = run_id("assimilate_seem", d.fields["sync_id"])
        details = {"parentRunId": base}
        event = json.loads(Serde.to_json(build_event(d, "fivetran://{group_id}", details=details)))
        assert schema_errors(event) == []
        run = event["run"]
        assert run["runId"] not in (base, as_json(record("openlineage:FAIL"))["run"]["runId"])
        again = build_event(d, "fivetran://{group_id}", details=details)
        assert again.run.runId == run["runId"]
        assert run["facets"]["parent"]["run"]["runId"] == base
        assert run["facets"]["parent"]["job"]["name"] == "assimilate_seem"
        assert run["facets"]["parent"]["job"]["namespace"] == "fivetran://inappropriate_implode"
        assert run["facets"]["parent"]["_schemaURL"].startswith("https://openlineage.io/spec/")

    def test_event_time_is_the_events_own(self) -> None:
        """The time Fivetran gave the start or end, not when the worker sent it."""
        assert as_json(record("openlineage:COMPLETE"))["eventTime"] == "2026-05-22T00:06:08.638Z"

    def test_outputs_are_the_known_tables(self) -> None:
        tables = [("postgres://db:5432", "analytics.salesforce.account")]
        event = as_json(record("openlineage:COMPLETE"), outputs=lambda c: tables)
        assert [(o["namespace"], o["name"]) for o in event["outputs"]] == tables
        assert schema_errors(event) == []

    def test_no_known_tables_no_outputs(self) -> None:
        assert as_json(record("openlineage:COMPLETE"))["outputs"] == []

    def test_destination_tables_become_outputs(self) -> None:
        """The per-table cache's answer (objects with namespace and name, or None) fits."""

        @dataclass(frozen=True)
        class Table:
            schema: str
            table: str
            namespace: str
            name: str
            uri: str

        cached = {"assimilate_seem": [Table("s", "t", "postgres://db:5432", "a.s.t", "x")]}
        outputs = table_outputs(cached.get)
        assert outputs("assimilate_seem") == [("postgres://db:5432", "a.s.t")]
        assert outputs("unknown") is None
        event = as_json(record("openlineage:COMPLETE"), outputs=outputs)
        assert event["outputs"][0]["name"] == "a.s.t"


class TestFacetSchema:
    """The facet's ``_schemaURL`` opens where the webhook server serves its schema."""

    PUBLIC = "https://events.example.com"

    def test_under_the_public_url_when_it_is_set(self) -> None:
        d = record("openlineage:COMPLETE")
        url = facet_schema_url(self.PUBLIC)
        event = json.loads(Serde.to_json(build_event(d, "fivetran://{group_id}", schema_url=url)))
        assert event["run"]["facets"]["fivetran_sync"]["_schemaURL"] == (
            "https://events.example.com/schemas/FivetranSyncRunFacet-1-0-0.json"
            "#/$defs/FivetranSyncRunFacet"
        )

    def test_the_sender_takes_the_setting_or_says_how_to_set_it(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """With FIVETRAN_EVENTS_PUBLIC_URL the sender's facets name it; without, the
        schema's urn, and one log line that says what the setting would give."""
        recorder, ours = cast(Any, None), "webhook_app.forwarding.lineage"
        with caplog.at_level(logging.INFO, logger=ours):
            public = LineageSender.from_settings(recorder, Settings(public_url=self.PUBLIC + "/"))
            assert public.schema_url == facet_schema_url(self.PUBLIC)
            assert LineageSender.from_settings(recorder, SETTINGS).schema_url == FACET_SCHEMA_URL
        [line] = [r.getMessage() for r in caplog.records if r.name == ours]
        assert "FIVETRAN_EVENTS_PUBLIC_URL" in line

    def test_the_served_schema_ships_and_the_manual_has_the_same(self) -> None:
        """The package data is the one source (pyproject.toml ships it); the manual's
        copy (docs/schemas/, which mkdocs publishes) must not drift from it."""
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # Python 3.10
            import tomli as tomllib
        from webhook_app.probes import SCHEMAS

        served = SCHEMAS / FACET_SCHEMA_PATH.rsplit("/", 1)[1]
        root = Path(__file__).parents[3]
        assert json.loads(served.read_text())["$id"] == FACET_SCHEMA_URL.split("#")[0]
        shipped = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
        globs = shipped["package-data"]["webhook_app"]
        assert any(served in (root / "webhook_app").glob(g) for g in globs)
        manual = root / "docs" / "schemas" / "FivetranSyncRunFacet.json"
        assert manual.read_bytes() == served.read_bytes()


class TestValidatorCatchesFaults:
    """The receiver's validation can fail: each planted fault is named."""

    def test_unknown_event_type(self) -> None:
        event = as_json(record("openlineage:COMPLETE"))
        event["eventType"] = "DONE"
        assert any("eventType" in e for e in schema_errors(event))

    def test_facet_without_required_field(self) -> None:
        event = as_json(record("openlineage:COMPLETE"))
        del event["run"]["facets"]["fivetran_sync"]["syncId"]
        assert any("syncId" in e for e in schema_errors(event))

    def test_facet_without_producer(self) -> None:
        event = as_json(record("openlineage:COMPLETE"))
        del event["job"]["facets"]["jobType"]["_producer"]
        assert any("_producer" in e for e in schema_errors(event))

    def test_run_id_not_a_uuid(self) -> None:
        event = as_json(record("openlineage:COMPLETE"))
        event["run"]["runId"] = "assimilate_seem:s1"
        assert any("runId" in e for e in schema_errors(event))

    def test_a_second_end_of_a_run(self) -> None:
        """The receiver refuses a run's second terminal event, not a resent one."""
        receiver = LineageReceiver()
        fail = as_json(record("openlineage:FAIL", status="FAILURE"))
        complete = as_json(record("openlineage:COMPLETE"))
        post = [receiver.receive("/api/v1/lineage", json.dumps(e).encode()) for e in (fail, fail)]
        assert post == [201, 201]
        assert receiver.receive("/api/v1/lineage", json.dumps(complete).encode()) == 400
        assert "already ended with FAIL" in receiver.invalid[0][1][0]

    def test_facet_of_unknown_schema(self) -> None:
        event = as_json(record("openlineage:COMPLETE"))
        event["run"]["facets"]["fivetran_sync"]["_schemaURL"] = "https://example.invalid/x.json"
        assert any("unknown _schemaURL" in e for e in schema_errors(event))


class TestEnabled:
    def test_off_and_on_decide(self, tmp_path: Path) -> None:
        env = {"OPENLINEAGE_URL": "http://127.0.0.1:5000"}
        assert not lineage_enabled(Settings(lineage="off"), env, tmp_path, tmp_path)
        assert lineage_enabled(Settings(lineage="on"), {}, tmp_path, tmp_path)

    @pytest.mark.parametrize(
        "env",
        [
            {"OPENLINEAGE_URL": "http://127.0.0.1:5000"},
            {"OPENLINEAGE_CONFIG": "/etc/openlineage.yml"},
            {"OPENLINEAGE__TRANSPORT__TYPE": "console"},
        ],
    )
    def test_auto_follows_the_clients_configuration(
        self, env: dict[str, str], tmp_path: Path
    ) -> None:
        assert lineage_enabled(SETTINGS, env, tmp_path, tmp_path)

    def test_auto_off_without_configuration_or_when_disabled(self, tmp_path: Path) -> None:
        assert not lineage_enabled(SETTINGS, {}, tmp_path, tmp_path)
        disabled = {"OPENLINEAGE_URL": "http://x", "OPENLINEAGE_DISABLED": "true"}
        assert not lineage_enabled(SETTINGS, disabled, tmp_path, tmp_path)

    def test_auto_finds_openlineage_yml(self, tmp_path: Path) -> None:
        (tmp_path / "openlineage.yml").write_text("transport:\n  type: console\n")
        assert lineage_enabled(SETTINGS, {}, tmp_path, tmp_path / "home")
