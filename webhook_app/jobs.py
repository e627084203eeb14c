"""RQ jobs run by ``fivetran-events worker``; they must be importable by the workers."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

#: The dotted path the webhook enqueues (a string, so the web process never runs it).
FORWARD_SYNC = "webhook_app.jobs.forward_sync"


def forward_sync(**sync: Any) -> dict[str, Any]:
    """Forward one successful sync to Airflow as a dataset event.

    The Airflow REST client arrives with the forwarding issue; until then the job only
    records that it ran, so the enqueue-with-the-history-write contract can be tested.
    """
    log.info("sync %s of %s is ready to forward", sync.get("sync_id"), sync.get("connector_id"))
    return {"forwarded": False, "reason": "forwarding to Airflow is not configured yet", **sync}
