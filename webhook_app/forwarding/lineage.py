"""OpenLineage's sender: build a sync's run event, send it, record the outcome.

The event is built from the delivery record alone, so every attempt sends the same
event, with the OpenLineage client and its own transport configuration. An end waits
while its sync's START is being delivered, so a receiver sees START first. A lost answer
may reach the receiver twice, as the same event: consumers key runs by run id and type.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

import attr
import redis
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import RunFacet, job_type_job, parent_run

from fivetran_events import HistoryReader, Settings, __version__
from fivetran_events.deliveries import FINAL, Delivery, DeliveryState, Field
from fivetran_events.keys import delivery_id
from fivetran_events.model import SOURCE_RECONCILED, SOURCE_WEBHOOK, EventKind
from fivetran_events.timeutil import iso

from ..exceptions import LineageUnavailable
from .enqueue import LINEAGE_PREFIX, event_type
from .recorder import AttemptResult, Recorder, retry_at

log = logging.getLogger(__name__)

#: Who made the events (the spec's ``producer``: a URI).
PRODUCER = f"urn:fivetran-events:{__version__}"
#: The custom run facet's JSON schema (webhook_app/schemas/), served at this path (probes.py);
#: its definition; its ``$id``, the ``_schemaURL`` unless FIVETRAN_EVENTS_PUBLIC_URL is set.
FACET_SCHEMA_PATH = "/schemas/FivetranSyncRunFacet-1-0-0.json"
FACET_DEFINITION = "#/$defs/FivetranSyncRunFacet"
FACET_SCHEMA_URL = "urn:fivetran-events:schema:FivetranSyncRunFacet:1-0-0" + FACET_DEFINITION
#: Run ids are UUID v5 in this namespace, of "<connector id>:<sync id>": START and the
#: end of one sync carry the same id whichever worker builds them, and a retry too.
RUN_NAMESPACE = uuid.UUID("6b1f3c1e-5f0a-5d4e-9a57-0c2f1b7d9e41")
#: The event types that end a run: the spec allows one per run.
TERMINAL = frozenset({"COMPLETE", "FAIL", "ABORT"})
#: How long an end waits for its START's delivery before it looks again, in ms.
START_FIRST_MS = 1000

#: A connector's tables as OpenLineage (namespace, name) pairs; None: unknown (no outputs).
Outputs = Callable[[str], "list[tuple[str, str]] | None"]


def target_type(target: str) -> str:
    """Return the OpenLineage event type a lineage target sends."""
    return target[len(LINEAGE_PREFIX) :].split(":", 1)[0]


def run_id(connector_id: str, sync_id: str, ended_ms: int | None = None) -> str:
    """Return the run id of one sync: the same for its START, its end and every retry;
    with ``ended_ms``, the run of a later end of that sync (a child of the sync's run)."""
    name = f"{connector_id}:{sync_id}" + ("" if ended_ms is None else f":{ended_ms}")
    return str(uuid.uuid5(RUN_NAMESPACE, name))


def facet_schema_url(public_url: str | None) -> str:
    """Return the facet's ``_schemaURL``: under the server's public URL when it is set."""
    return f"{public_url}{FACET_SCHEMA_PATH}{FACET_DEFINITION}" if public_url else FACET_SCHEMA_URL


def job_namespace(template: str, connector_id: str, group_id: str) -> str:
    """Return the job namespace of a connector's runs (``FIVETRAN_EVENTS_LINEAGE_NAMESPACE``;
    by group, as connection ids are unique only within an account; unknown: ``default``)."""
    return template.format(connector_id=connector_id, group_id=group_id or "default")


def no_outputs(connector_id: str) -> list[tuple[str, str]] | None:
    """Know no tables (until the destination's tables are cached)."""
    return None


class NamedTable(Protocol):
    """A destination table as ``fivetran_events.destinations.DestinationTable`` has it."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


def table_outputs(tables: Callable[[str], Sequence[NamedTable] | None]) -> Outputs:
    """Turn a connector's cached destination tables (None: not known) into ``Outputs``."""

    def outputs(connector_id: str) -> list[tuple[str, str]] | None:
        found = tables(connector_id)
        return None if found is None else [(t.namespace, t.name) for t in found]

    return outputs


@attr.define
class FivetranSyncRunFacet(RunFacet):
    """What Fivetran said of the sync: its connector, sync id and status."""

    connectorId: str
    syncId: str
    connectorName: str | None = attr.field(default=None)
    connectorType: str | None = attr.field(default=None)
    groupId: str | None = attr.field(default=None)
    status: str | None = attr.field(default=None)
    startedAt: str | None = attr.field(default=None)
    failureReason: str | None = attr.field(default=None)
    taskType: str | None = attr.field(default=None)

    @staticmethod
    def _get_schema() -> str:
        return FACET_SCHEMA_URL


def sync_details(client: redis.Redis, settings: Settings, d: Delivery) -> dict[str, str]:
    """Read what the history holds of an end beyond the record (one round trip; none for a
    START): when the sync started, a failure's reason and task type, and the run id of an
    earlier end of the same sync id (FAILED then SUCCESSFUL), as this end's parent."""
    kind = target_type(d.uri)
    ended = d.ms(Field.ENDED_MS)
    if kind == "START" or ended is None:
        return {}
    f = d.fields
    reader = HistoryReader(client, settings.key_prefix, settings.max_sync_duration_ms)
    connector, sync = f[Field.CONNECTOR_ID], f[Field.SYNC_ID]
    ends, first_start = reader.sync_ends(connector, sync, ended)
    end = next((c for c in reversed(ends) if c.ended_ms == ended), None)
    started = end.started_ms if end is not None and end.started_ms is not None else first_start
    # An end sent as lineage (lineage_targets) whose event type ends a run.
    closed = [
        c
        for c in ends
        if c.ended_ms < ended
        and c.source in (SOURCE_WEBHOOK, SOURCE_RECONCILED)
        and event_type(EventKind.SYNC_END, c.status) in TERMINAL
    ]
    details = {
        "startedAt": iso(int(started)) if started is not None else None,
        "failureReason": end.reason if end is not None else None,
        "taskType": end.task_type if end is not None else None,
        "parentRunId": run_id(connector, sync) if closed else None,
    }
    return {k: v for k, v in details.items() if v}


def build_event(
    d: Delivery,
    namespace_template: str,
    outputs: Outputs = no_outputs,
    details: dict[str, str] | None = None,
    schema_url: str = FACET_SCHEMA_URL,
) -> RunEvent:
    """Build the OpenLineage event of lineage delivery ``d`` (pure: the record and the
    ``details`` read once from the history, ``sync_details``, decide it)."""
    f = d.fields
    details = details or {}
    connector, sync = f[Field.CONNECTOR_ID], f[Field.SYNC_ID]
    kind = target_type(d.uri)
    ms = d.ms(Field.ENDED_MS) or d.ms(Field.RECEIVED_MS)  # the event's own time (start or end)
    namespace = job_namespace(namespace_template, connector, f.get(Field.GROUP_ID) or "")
    run = run_id(connector, sync)
    parent = details.get("parentRunId")
    sync_facet = FivetranSyncRunFacet(
        connectorId=connector,
        syncId=sync,
        connectorName=f.get(Field.CONNECTOR_NAME) or None,
        connectorType=f.get(Field.CONNECTOR_TYPE) or None,
        groupId=f.get(Field.GROUP_ID) or None,
        status=f.get(Field.STATUS) or None,
        startedAt=details.get("startedAt"),
        failureReason=details.get("failureReason"),
        taskType=details.get("taskType"),
        producer=PRODUCER,
    )
    sync_facet._schemaURL = schema_url
    facets: dict[str, RunFacet] = {"fivetran_sync": sync_facet}
    if parent:
        # The sync's run has ended already: this end is a run of its own, a child of it.
        run = run_id(connector, sync, ms)
        facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=parent),
            job=parent_run.Job(namespace=namespace, name=connector),
            producer=PRODUCER,
        )
    job_facets = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration="FIVETRAN", jobType="SYNC", producer=PRODUCER
        )
    }
    return RunEvent(
        eventType=RunState[kind],
        eventTime=iso(ms) or "",
        run=Run(runId=run, facets=facets),
        job=Job(namespace=namespace, name=connector, facets=job_facets),  # type: ignore[arg-type]
        inputs=[],
        outputs=[OutputDataset(namespace=ns, name=name) for ns, name in outputs(connector) or []],
        producer=PRODUCER,
    )


class Emitter(Protocol):
    """What sends an event: ``OpenLineageClient``, or a stand-in with its ``emit``."""

    def emit(self, event: RunEvent) -> None: ...


class LineageSender:
    """Send a sync's OpenLineage run events with the client, naming its tables' outputs."""

    def __init__(
        self,
        recorder: Recorder,
        client: Emitter,
        namespace_template: str,
        outputs: Outputs = no_outputs,
        schema_url: str = FACET_SCHEMA_URL,
    ) -> None:
        self.recorder = recorder
        self.client = client
        self.namespace_template = namespace_template
        self.outputs = outputs
        self.schema_url = schema_url

    @classmethod
    def from_settings(
        cls, recorder: Recorder, settings: Settings, outputs: Outputs = no_outputs
    ) -> LineageSender:
        """Build the client from its own configuration (none: it logs each event)."""
        if not settings.public_url:
            log.info(
                "the OpenLineage facet's _schemaURL is a urn: set FIVETRAN_EVENTS_PUBLIC_URL "
                "(this server's public URL) to make it a schema a reader can open"
            )
        schema_url = facet_schema_url(settings.public_url)
        return cls(recorder, OpenLineageClient(), settings.lineage_namespace, outputs, schema_url)

    def not_before(self, d: Delivery) -> int | None:
        """An end waits while its sync's START is still being delivered; else its retry."""
        if target_type(d.uri) != "START":
            f = d.fields
            start = self.recorder.store.get(
                delivery_id(f[Field.CONNECTOR_ID], f[Field.SYNC_ID], LINEAGE_PREFIX + "START")
            )
            if start is not None and start.state not in FINAL:
                soon = self.recorder.clock() + START_FIRST_MS
                return max(soon, start.ms(Field.NEXT_ATTEMPT_MS) or 0)
        return retry_at(d)

    def send(self, d: Delivery) -> AttemptResult:
        """Send lineage delivery ``d`` (its lease held by the forwarder)."""
        r = self.recorder
        # Read from the history once and kept on the record: every attempt sends the same.
        details = json.loads(d.get(Field.EXTRA) or "null")
        if details is None:
            details = sync_details(r.redis, r.settings, d)
        event = build_event(d, self.namespace_template, self.outputs, details, self.schema_url)
        r.begin(d, details)
        try:
            self.client.emit(event)
        except Exception as exc:
            rejected = _rejected(exc)
            if rejected is not None:
                return r.give_up(d, DeliveryState.FAILED, rejected)
            return r.retry(d, LineageUnavailable(exc))
        kind = target_type(d.uri)
        fields = {Field.EVENT_AT: iso(r.clock()) or "", Field.LINEAGE_EVENT: kind}
        return r.delivered(d, fields, f"OpenLineage {kind} sent (run {event.run.runId})")


def _rejected(exc: Exception) -> str | None:
    """Return why the receiver refused the event for good (a 4xx but 429), else None."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int) and 400 <= status < 500 and status != 429:
        body = (getattr(response, "text", "") or "")[:500]
        return f"the OpenLineage receiver answered {status}: {body}".rstrip(": ")
    return None
