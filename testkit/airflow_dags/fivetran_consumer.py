"""Test DAGs scheduled on Fivetran connectors' datasets (copied into the test Airflow).

Each run writes what it saw in ``triggering_asset_events`` to ``$FTE_TEST_OUTPUT``, one
JSON file per run, so tests can check what reached the DAG.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from airflow.sdk import DAG, Asset, task

#: The connectors the tests forward; each gets a consumer DAG ``consume_<connector>``.
#: ``e2e`` makes its URI a substring of ``e2e_conn``'s: the exact-URI lookup must tell them apart.
CONNECTORS = ("e2e_conn", "e2e", "fault_conn", "kill_conn", "bench_conn")


def _make(connector_id: str) -> DAG:
    asset = Asset(f"fivetran://connector/{connector_id}")
    with DAG(
        dag_id=f"consume_{connector_id}",
        schedule=[asset],
        catchup=False,
        # No run waits in "queued": Airflow 3.3's GET /api/v2/assets/events answers 500
        # while an event it lists created a run that has not started (the response's
        # created_dagruns[].start_date is required), and the forwarding lookups and the
        # tests' counts list these events. A backlog of runs behind 16 running ones kept
        # that up for minutes in CI (test_forward_faults' outage); the short window of a
        # run the scheduler has not started yet, testkit/airflow_api.py waits out.
        max_active_runs=10_000,
        tags=["fivetran-events-tests"],
    ) as dag:

        @task
        def record(triggering_asset_events=None, run_id=None) -> None:  # type: ignore[no-untyped-def]
            seen = []
            for _asset, events in (triggering_asset_events or {}).items():
                for ev in events:
                    seen.append(
                        {
                            "uri": getattr(ev, "uri", None) or str(_asset),
                            "extra": dict(ev.extra or {}),
                            "timestamp": ev.timestamp.isoformat(),
                        }
                    )
            out = Path(os.environ.get("FTE_TEST_OUTPUT", "/tmp")) / connector_id
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{run_id}.json".replace(":", "_").replace("+", "_")).write_text(
                json.dumps({"run_id": run_id, "events": seen})
            )

        record()
    return dag


for _cid in CONNECTORS:
    globals()[f"consume_{_cid}"] = _make(_cid)
