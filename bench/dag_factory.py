"""Benchmark building a DAG from a folder of 500 SQL files.

Baseline, measured in the same run: building a DAG of as many tasks by hand (the same
SQL operator, no folder scan, no SQL parsing). Prints both, their ratio, and the time
per file. Airflow parses DAG files over and over, so this is the cost paid each time.

    .venv/bin/python -m bench.dag_factory [--files 500] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="fte-bench-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

# A realistic step: a template block, a CTE over two connectors' tables, and a join on
# the previous step's output (a table of the same group).
SQL = """
-- step {i}
{{% if full_refresh %}} DELETE FROM analytics.t{i}; {{% endif %}}
WITH base AS (
  SELECT a.id, a.name, SUM(c.amount) AS total
  FROM salesforce.account AS a JOIN stripe.charge AS c ON c.account_id = a.id
  WHERE c.created > '{{{{ ds }}}}' GROUP BY 1, 2)
INSERT INTO analytics.t{i} SELECT * FROM base JOIN {upstream} USING (id)
"""


def make_folder(root: Path, files: int) -> None:
    """Write ``files`` SQL files in groups of ten (sub-folders) and a dag.toml."""
    (root / "dag.toml").write_text('[connectors]\nsalesforce = "sf"\nstripe = "st"\n')
    for i in range(files):
        group = root / f"g{i // 10:03d}"
        group.mkdir(exist_ok=True)
        upstream = f"analytics.t{i - 1}" if i % 10 else "salesforce.contact"
        (group / f"{i % 10:02d}_step.sql").write_text(SQL.format(i=i, upstream=upstream))


def by_hand(files: int) -> float:
    from airflow.sdk import DAG, chain

    from airflow_plugin.operators.sql import FivetranSqlOperator

    t0 = time.perf_counter()
    with DAG(dag_id="by_hand", schedule=None):
        ops = [
            FivetranSqlOperator(task_id=f"t{i}", conn_id="warehouse", sql="SELECT 1")
            for i in range(files)
        ]
        chain(*ops)
    return time.perf_counter() - t0


def factory(root: Path) -> float:
    from airflow_plugin.dag_factory import build_dag

    t0 = time.perf_counter()
    build_dag(root, dag_id="from_folder")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    if not 1 <= a.files <= 5000 or not 1 <= a.repeat <= 50:
        ap.error("--files must be 1-5000 and --repeat 1-50")
    with tempfile.TemporaryDirectory(prefix="fte-bench-sql-") as tmp:
        root = Path(tmp) / "pipeline"
        root.mkdir()
        make_folder(root, a.files)
        by_hand(10)
        factory(root)  # warm imports
        hand = [by_hand(a.files) for _ in range(a.repeat)]
        fact = [factory(root) for _ in range(a.repeat)]
    h, f = statistics.median(hand), statistics.median(fact)
    print(f"files={a.files} repeat={a.repeat} (medians)")
    print(f"DAG of {a.files} tasks built by hand:   {h * 1000:8.1f} ms")
    print(
        f"DAG built from {a.files} SQL files:     {f * 1000:8.1f} ms "
        f"({f / a.files * 1000:.2f} ms per file)"
    )
    print(f"ratio factory/by-hand: {f / h:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
