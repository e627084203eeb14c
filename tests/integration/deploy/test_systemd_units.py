"""deploy/'s systemd units are hardened, by systemd's own rating (their secrets arrive as
credentials: tests/unit/deploy/test_systemd_credentials.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from testkit.deploy_files import UNITS

#: systemd-analyze's scale runs from 0 (locked down) to 10 (exposed); "OK" ends at 4.0.
MAX_EXPOSURE = 4.0


def exposure(unit: Path) -> float:
    """The overall exposure ``systemd-analyze security --offline=yes`` gives the file."""
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze is missing (apt-get install systemd)"
    out = subprocess.run(
        [tool, "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out.stdout + out.stderr)
    assert found, out.stdout + out.stderr
    return float(found.group(1))


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
class TestUnit:
    def test_exposure_is_at_most_4(self, unit: Path) -> None:
        assert exposure(unit) <= MAX_EXPOSURE
