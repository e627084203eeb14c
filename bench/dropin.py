"""astronomer's four example DAGs with astronomer's provider and with the drop-in.

The DAGs of testkit/astronomer_dags/ (the shape of astronomer's ``dev/dags/``: one
sync; one by names; a sync not waited for, then a sensor on the operator's XCom; two
resyncs) run twice on one real Airflow 3 (``bench.sensor.airflow_with_redis``): as
written, importing ``airflow_plugin.astronomer``, and with those import lines pointing
back at ``fivetran_provider_async`` (a dev dependency; its hook is pointed at the stand-in
as ``bench.sync`` does). One Fivetran stand-in serves both, ends each sync
``--sync-seconds`` after it starts and POSTs the signed webhooks to the real webhook
server. Per DAG and provider, ``--runs`` runs one after the other (the first is the
scheduled run the DAG gets when parsed; the others are triggered):

- Fivetran API calls per DAG run (the stand-in counts every call);
- the time from the end of the run's last sync (the stand-in's clock) to the DAG run's
  success (``dag_run.end_date``), p50 and p99.

    python -m bench.dropin [--runs N] [--sync-seconds S] [--only DAG_ID]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from bench.sensor import pct, wait
from bench.sync import API_SECRET, KEY, beside_astronomer
from testkit.fivetran_api import FivetranStandIn

DAGS = Path(__file__).resolve().parent.parent / "testkit" / "astronomer_dags"
#: file -> the DAG id it defines.
EXAMPLES = {
    "example_fivetran.py": "example_fivetran",
    "example_fivetran_without_connector_id.py": "example_fivetran_without_conn_id",
    "example_fivetran_xcom.py": "example_fivetran_xcom",
    "example_fivetran_resync.py": "example_fivetran_resync",
}
CONNECTOR, SCHEMA, GROUP, DESTINATION = "bench_astro", "bench_schema", "bench_g", "Bench WH"
OURS = re.compile(r"^from airflow_plugin\.astronomer import (.+)$", re.MULTILINE)


def variant(source: str, dag_id: str, theirs: bool) -> tuple[str, str]:
    """The example's source and DAG id for one provider: astronomer's imports when
    ``theirs``, and the DAG id suffixed so both variants live side by side."""
    suffixed = f"{dag_id}_{'theirs' if theirs else 'ours'}"
    source = source.replace(f'"{dag_id}"', f'"{suffixed}"', 1)
    if theirs:

        def astronomers(m: re.Match[str]) -> str:
            names = [n.strip() for n in m.group(1).split(",")]
            module = {"FivetranSensor": "sensors"}
            return "\n".join(
                f"from fivetran_provider_async.{module.get(n, 'operators')} import {n}"
                for n in names
            )

        source = OURS.sub(astronomers, source)
    return source, suffixed


def _finished_run(airflow: Any, dag_id: str, run_id: str | None) -> tuple[str, datetime] | None:
    """The run (the first one when ``run_id`` is None) and its end once it succeeded."""
    rows = airflow.query(
        "select run_id, state, end_date from dag_run where dag_id=%s order by id", dag_id
    )
    rows = [r for r in rows if run_id in (None, r[0])][:1]
    if not rows or rows[0][1] not in ("success", "failed"):
        return None
    if rows[0][1] != "success":
        raise SystemExit(f"{dag_id} {rows[0][0]} failed:\n{airflow.logs('scheduler')}")
    return rows[0][0], datetime.fromisoformat(str(rows[0][2])).replace(tzinfo=timezone.utc)


def measure(
    airflow: Any, api: FivetranStandIn, filename: str, theirs: bool, runs: int
) -> dict[str, list[float]]:
    """Add the variant's DAG and run it ``runs`` times; calls and sync end to success."""
    source, dag_id = variant((DAGS / filename).read_text(), EXAMPLES[filename], theirs)
    calls: list[float] = []
    latency: list[float] = []
    for n in range(runs):
        before, started = api.total_calls, len(api.started)
        run_id = None
        if n == 0:
            airflow.add_dag(f"bench_{dag_id}.py", source)
        else:
            run_id = f"bench-{n}"
            airflow.trigger(dag_id, run_id)

        def finished(r: str | None = run_id) -> tuple[str, datetime] | None:
            return _finished_run(airflow, dag_id, r)

        _, ended_at = wait(f"{dag_id} run {n}", finished, 900, 0.1)
        calls.append(api.total_calls - before)
        ends = [api.ended[s[1]][0] for s in api.started[started:] if s[1] in api.ended]
        latency.append((ended_at - max(ends)).total_seconds())
    return {"calls": calls, "latency": latency}


def row(name: str, got: dict[str, list[float]]) -> str:
    lat = got["latency"]
    return (
        f"| {name} | {statistics.mean(got['calls']):.1f} | {pct(lat, 0.5):.2f} "
        f"| {pct(lat, 0.99):.2f} |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per DAG and provider")
    # Longer than the drop-in's min_deferral (10 s), as in bench.sync.
    parser.add_argument("--sync-seconds", type=float, default=15.0)
    parser.add_argument("--only", choices=list(EXAMPLES.values()), help="one example DAG")
    args = parser.parse_args(argv)
    examples = {f: d for f, d in EXAMPLES.items() if args.only in (None, d)}
    variables = {
        "AIRFLOW_VAR_CONNECTOR_ID": CONNECTOR,
        "AIRFLOW_VAR_CONNECTOR_NAME": SCHEMA,
        "AIRFLOW_VAR_DESTINATION_NAME": DESTINATION,
    }
    with tempfile.TemporaryDirectory(prefix="fte-bench-dropin-") as tmp:
        api = FivetranStandIn(sync_seconds=args.sync_seconds, api_key=KEY, api_secret=API_SECRET)
        # astronomer's operator parses the previous succeeded_at/failed_at.
        before = datetime.now(timezone.utc) - timedelta(days=1)
        api.group(GROUP, DESTINATION)
        api.connector(
            CONNECTOR,
            succeeded_at=before,
            failed_at=before - timedelta(days=1),
            group_id=GROUP,
            schema=SCHEMA,
        )
        with beside_astronomer(Path(tmp), api, **variables) as airflow:
            t = time.monotonic()
            results = {
                (filename, theirs): measure(airflow, api, filename, theirs, args.runs)
                for filename in examples
                for theirs in (True, False)
            }
            took = time.monotonic() - t
    print(
        f"\nastronomer's example DAGs, {args.runs} runs each, syncs of {args.sync_seconds:g} s, "
        f"real Airflow 3 ({took:.0f} s):\n"
    )
    print(
        "| DAG, provider | Fivetran API calls per run | sync's end to run success p50 s | p99 s |"
    )
    print("|---|---|---|---|")
    for filename, dag_id in examples.items():
        for theirs in (True, False):
            who = "astronomer" if theirs else "drop-in"
            print(row(f"{dag_id}, {who}", results[(filename, theirs)]))
    print()
    for filename, dag_id in examples.items():
        astro, ours = results[(filename, True)], results[(filename, False)]
        calls = statistics.mean(astro["calls"]) / statistics.mean(ours["calls"])
        p50 = pct(astro["latency"], 0.5) / max(pct(ours["latency"], 0.5), 1e-3)
        print(f"{dag_id}: ratio astronomer/drop-in: API calls x{calls:.1f}, p50 x{p50:.1f}")


if __name__ == "__main__":
    main()
