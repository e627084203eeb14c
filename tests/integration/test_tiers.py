"""``pytest tests/unit`` starts no Redis and no Airflow, and takes seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from testkit.processes import stop_group

ROOT = Path(__file__).resolve().parents[2]
#: Fixtures that start a process (pytest-redis's server, the Airflow harnesses).
PROCESS_FIXTURES = {"redis_proc", "redisdb", "redis_nooproc", "airflow3", "airflow2", "airflow_db"}
#: "Seconds": the CPU time of the tier's session (collection and tests; about 9 s here).
#: CPU, not wall time: this test runs among the suite's other workers (pytest-xdist),
#: which stretch the wall clock but not the tier's own work. Alone, wall is about CPU.
UNIT_BUDGET_S = 15.0
#: The child's whole life, interpreter start included: a bound on a hang, not a budget.
UNIT_HANG_S = 60.0

PROBE = textwrap.dedent(
    """
    import json, os, resource, sys, time

    SET_UP = set()
    STARTED = []

    def cpu():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def pytest_sessionstart(session):
        STARTED.extend([time.monotonic(), cpu()])

    def pytest_fixture_setup(fixturedef, request):
        SET_UP.add(fixturedef.argname)

    def pytest_sessionfinish(session, exitstatus):
        with open(os.environ["TIER_PROBE_OUT"], "w") as f:
            json.dump({
                "fixtures": sorted(SET_UP),
                "modules": sorted(m for m in sys.modules if m.startswith("testkit")),
                "exit": int(exitstatus),
                "collected": session.testscollected,
                "seconds": time.monotonic() - STARTED[0],
                "cpu_seconds": cpu() - STARTED[1],
            }, f)
    """
)


def test_unit_folder_starts_no_redis_or_airflow(tmp_path: Path) -> None:
    """Run tests/unit in a child pytest; watch its process tree while it runs."""
    (tmp_path / "tier_probe.py").write_text(PROBE)
    out = tmp_path / "probe.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "TIER_PROBE_OUT": str(out),
    }
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/unit",
            "-q",
            "-p",
            "tier_probe",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    seen: set[str] = set()
    parent = psutil.Process(proc.pid)
    try:
        while proc.poll() is None:
            assert time.monotonic() - started < UNIT_HANG_S, "tests/unit hangs"
            for child in parent.children(recursive=True):
                try:
                    seen.add(" ".join(child.cmdline()) or child.name())
                except psutil.Error:
                    continue  # it ended between listing and reading
            time.sleep(0.02)
    finally:
        stop_group(proc, timeout=10)
    elapsed = time.monotonic() - started
    log = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    result = json.loads(out.read_text())
    print(
        f"tests/unit: {result['collected']} tests in {result['seconds']:.1f} s, "
        f"{result['cpu_seconds']:.1f} s of CPU ({elapsed:.1f} s with the interpreter's "
        f"start); children seen: {seen}"
    )
    assert result["exit"] == 0 and result["collected"] > 0, log[-3000:]
    assert result["cpu_seconds"] < UNIT_BUDGET_S, "tests/unit is not fast"
    assert PROCESS_FIXTURES & set(result["fixtures"]) == set()
    assert {"testkit.airflow_harness", "testkit.airflow2_harness"} & set(result["modules"]) == set()
    assert [c for c in seen if "redis-server" in c or "airflow" in c] == []
