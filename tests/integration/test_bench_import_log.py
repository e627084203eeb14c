"""bench/import_log.py runs end to end on a small export and reports what it measured.

Real parts: two redis-servers of the bench's own on 127.0.0.1, the CLI in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from bench.import_log import ROOT, log_row, write_export
from bench.storage import events
from fivetran_events.log_import import Columns, RowFilter, Summary, events_of, read_file
from fivetran_events.timeutil import now_ms


def test_the_export_reads_back_as_the_same_events(tmp_path: Path) -> None:
    """What the bench writes is what the import reads: the same syncs, marked imported."""
    now = now_ms()
    path = tmp_path / "log.jsonl"
    write_export(path, 40, 4, now)
    found = read_file(path)
    back = list(events_of(found.rows, found.columns, RowFilter(), Summary()))
    original = list(events(40, 4, now))
    assert [(e.dedup_id, e.source) for e in back] == [(e.dedup_id, "I") for e in original]
    assert isinstance(found.columns, Columns)
    row = log_row(original[0], 0)
    assert datetime.strptime(str(row["TIME_STAMP"]), "%Y-%m-%d %H:%M:%S.%f")


def test_a_small_run_reports_rates_and_bytes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.import_log", "--rows", "2000", "--connectors", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    out = done.stdout
    assert "2,000 LOG rows (1,000 syncs" in out
    summary = json.loads(out.split("summary ", 1)[1].splitlines()[0])
    assert (summary["recorded"], summary["already_known"], summary["skipped"]) == (2000, 0, {})
    assert "import/baseline" in out
    assert "INFO used_memory delta" in out and "MEMORY USAGE of the keys" in out
