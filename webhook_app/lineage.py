"""OpenLineage for every sync: which transitions become events, and how a run is named.

The web side's half, pure and free of the OpenLineage client (the web process never
imports it): whether lineage is on, which lineage deliveries a recorded event makes,
the run id of a sync and the job of a connector. The worker side
(``forwarding/lineage.py``) builds the events with ``openlineage-python`` and sends them.

A lineage delivery is a forwarding delivery (``forwarding/``) of kind ``lineage`` whose
target is not an Airflow dataset URI but ``openlineage:<EVENT TYPE>``: it is created by
the webhook's one script, due now, swept, attempted, retried and given up exactly as a
dataset delivery is, and its id (connector, sync id, target) makes each transition of a sync one
delivery, so a redelivered webhook sends nothing twice.

Fivetran's ``sync_end`` statuses map to OpenLineage's run states so:

- SUCCESSFUL: COMPLETE;
- FAILURE, FAILURE_WITH_TASK, FAILED: FAIL;
- CANCELED: ABORT (the sync was stopped and will not finish);
- RESCHEDULED and any status nobody knows yet: OTHER, which leaves the run open
  (Fivetran resumes a rescheduled sync later; its real end closes the run).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path

from fivetran_events import Event, Settings
from fivetran_events.model import (
    FAILURE_STATUSES,
    SOURCE_RECONCILED,
    SOURCE_WEBHOOK,
    SUCCESS_STATUSES,
    EventKind,
)

#: A lineage delivery's target starts with this (a dataset URI never does: no "//").
TARGET_PREFIX = "openlineage:"
#: Run ids are UUID v5 in this namespace, of "<connector id>:<sync id>": START and the
#: end of one sync carry the same id whichever worker builds them, and a retry too.
RUN_NAMESPACE = uuid.UUID("6b1f3c1e-5f0a-5d4e-9a57-0c2f1b7d9e41")
#: Statuses that stop a sync for good without success or failure.
ABORT_STATUSES = frozenset({"CANCELED", "CANCELLED"})
#: The variables with which the OpenLineage client finds its transport
#: (``OpenLineageClient()``'s own lookup); any of them set turns lineage on in ``auto``.
CLIENT_VARIABLES = ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG")
#: Dynamic transport configuration (``OPENLINEAGE__TRANSPORT__TYPE=http`` ...).
CLIENT_PREFIX = "OPENLINEAGE__TRANSPORT"


def lineage_enabled(
    settings: Settings,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> bool:
    """Return whether syncs are sent as OpenLineage runs.

    ``FIVETRAN_EVENTS_LINEAGE`` = on or off decides; ``auto`` (the default) is on when
    the OpenLineage client would find a transport: ``OPENLINEAGE_URL``,
    ``OPENLINEAGE_CONFIG``, ``OPENLINEAGE__TRANSPORT__*`` or an ``openlineage.yml`` in
    the working directory or ``~/.openlineage``, unless ``OPENLINEAGE_DISABLED=true``.
    """
    if settings.lineage != "auto":
        return settings.lineage == "on"
    env = os.environ if environ is None else environ
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if any(env.get(v) for v in CLIENT_VARIABLES):
        return True
    if any(k.startswith(CLIENT_PREFIX) for k in env):
        return True
    cwd = Path.cwd() if cwd is None else cwd
    home = Path.home() if home is None else home
    return (cwd / "openlineage.yml").is_file() or (home / ".openlineage/openlineage.yml").is_file()


def event_type(kind: EventKind, status: str) -> str:
    """Return the OpenLineage event type of a sync_start, or of a sync_end's status."""
    if kind is EventKind.SYNC_START:
        return "START"
    if status in SUCCESS_STATUSES:
        return "COMPLETE"
    if status in FAILURE_STATUSES:
        return "FAIL"
    if status in ABORT_STATUSES:
        return "ABORT"
    return "OTHER"


def targets(event: Event) -> list[str]:
    """Return the lineage deliveries ``event`` makes: one for a start or an end, else none.

    An OTHER carries its status in the target, so a RESCHEDULED and a later unknown
    status of one sync are two deliveries; the other types are one per sync. Only what
    happens now is sent: webhook deliveries and reconciled ends (a webhook Fivetran never
    delivered), never an import of the LOG table's past.
    """
    if event.kind not in (EventKind.SYNC_START, EventKind.SYNC_END) or event.sync_id is None:
        return []
    if event.source not in (SOURCE_WEBHOOK, SOURCE_RECONCILED):
        return []
    kind = event_type(event.kind, event.status or "")
    if kind == "OTHER":
        return [f"{TARGET_PREFIX}OTHER:{event.status or ''}"]
    return [TARGET_PREFIX + kind]


def target_type(target: str) -> str:
    """Return the OpenLineage event type a lineage target sends."""
    return target[len(TARGET_PREFIX) :].split(":", 1)[0]


def run_id(connector_id: str, sync_id: str) -> str:
    """Return the run id of one sync: the same for its START, its end and every retry."""
    return str(uuid.uuid5(RUN_NAMESPACE, f"{connector_id}:{sync_id}"))


def job_namespace(template: str, connector_id: str, group_id: str) -> str:
    """Return the job namespace of a connector's runs (``FIVETRAN_EVENTS_LINEAGE_NAMESPACE``).

    Default ``fivetran://{group_id}``: the destination group, as Fivetran's own
    connection ids are unique only within an account; a connector whose group is unknown
    (an old payload without it) falls back to ``fivetran://default``.
    """
    return template.format(connector_id=connector_id, group_id=group_id or "default")
