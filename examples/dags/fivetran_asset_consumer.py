"""A hand-written DAG that runs within about a second of each successful sync.

fivetran-events' worker posts an asset event for every successful sync of the
connector; this DAG is scheduled on that asset, built with the same URI function the
worker uses, and reads the sync's details from the event's ``extra``.
"""

from __future__ import annotations

import logging

from airflow.sdk import DAG, Asset, task

from fivetran_events.uris import dataset_uri

CONNECTOR_ID = "demo_connector"
log = logging.getLogger(__name__)

with DAG(
    dag_id="fivetran_asset_consumer",
    schedule=[Asset(dataset_uri(CONNECTOR_ID))],
    catchup=False,
    tags=["fivetran-events", "example"],
    doc_md=__doc__,
):

    @task
    def report(*, triggering_asset_events=None) -> list[dict]:  # type: ignore[no-untyped-def]
        """Log each sync that triggered this run (several may arrive together)."""
        seen = []
        for asset, events in (triggering_asset_events or {}).items():
            for event in events:
                extra = dict(event.extra or {})
                log.info(
                    "sync %s of %s ended %s (full refresh: %s) -> %s",
                    extra.get("sync_id"),
                    extra.get("connector_id"),
                    extra.get("ended_at"),
                    extra.get("full_refresh"),
                    asset,
                )
                seen.append(extra)
        return seen

    report()
