"""bench/tables.py runs end to end on a small connector and reports what it measured.

Real parts: a redis-server of the bench's own, the Fivetran and Airflow 2 stand-ins.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from bench.tables import ROOT


def test_a_small_run_counts_one_post_per_read_table() -> None:
    """50 enabled tables, 3 read: 3 POSTs a sync, one listing, a webhook write within a
    few bytes of the connector granularity's, and less kept for 72 h than it keeps."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.tables", "--tables", "50", "--consumed", "3", "--syncs", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    # label, then the columns, each two spaces or more apart
    lines = {
        re.split(r"\s{2,}", line.strip())[0]: line.split()
        for line in done.stdout.splitlines()[2:10]
    }
    assert lines["POSTs to Airflow"][-3:] == ["1.0", "3.0", "3.00"]
    assert lines["asset listings (GET)"][-2] == "1.0"
    write_ratio = float(lines["Redis bytes at the webhook's write"][-1])
    assert 0.8 < write_ratio < 1.3
    # what a sync leaves for the keep time is its one table-level delivery
    kept = lines["of which kept 72 h"]
    assert float(kept[-2].replace(",", "")) < float(kept[-3].replace(",", ""))
