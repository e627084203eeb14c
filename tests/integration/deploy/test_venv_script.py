"""deploy/venv.sh installs only what a venv lacks: ``make up`` after ``make install``
(fewer extras) must not reinstall the editable project under running processes.

The venv is a stand-in whose ``python`` records how it was called; nothing is installed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ALL = "server,airflow,sql,import,lineage,dev"


def fake_venv(tmp_path: Path) -> tuple[Path, Path]:
    venv, calls = tmp_path / "venv", tmp_path / "calls"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    python.chmod(0o755)
    return venv, calls


def venv_sh(venv: Path, extras: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REQUIRE", "LOCK")}
    subprocess.run(
        ["bash", str(ROOT / "deploy" / "venv.sh"), extras],
        env={**env, "VENV": str(venv)},
        check=True,
        capture_output=True,
        timeout=60,
    )
    calls = venv.parent / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_fewer_extras_than_installed_install_nothing(tmp_path: Path) -> None:
    venv, _ = fake_venv(tmp_path)
    (venv / f".installed-{ALL}").touch()
    assert venv_sh(venv, "server,airflow,sql") == []
    assert venv_sh(venv, "server") == []


def test_an_extra_not_installed_or_an_older_install_installs(tmp_path: Path) -> None:
    venv, _ = fake_venv(tmp_path)
    stamp = venv / ".installed-server,airflow"
    stamp.touch()
    calls = venv_sh(venv, "server,sql")
    assert any("-e .[server,sql]" in c for c in calls), calls
    (venv.parent / "calls").unlink()
    for s in venv.glob(".installed-*"):
        os.utime(s, (0, 0))  # older than pyproject.toml: that install is stale
    assert any("-e .[server]" in c for c in venv_sh(venv, "server"))
