"""bench/freshness.py runs end to end: reconcile costs one paged list, the scrape gets a
series per connector with an objective. A redis-server and the Fivetran stand-in of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_reconcile_is_one_paged_list_and_the_scrape_has_the_overdue_series() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.freshness", "--connectors", "25", "--rounds", "2"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Fivetran calls: {'GET /v1/connections': 1, 'GET /v1/webhooks': 1}" in out.stdout
    assert "overdue series after reconcile: 15 " in out.stdout  # 25 less 5 manual, 5 paused
    assert "ratio after / before: x" in out.stdout
