"""Look the locked versions up in the vulnerability databases pip-audit can reach, and say
plainly what was checked and what could not be.

    python .ci/audit.py [requirements/lock.txt ...]

pip-audit runs from a virtualenv of its own (.venv-audit, made on first use), so it never
changes the project's. Each lock file is audited as pinned (``--no-deps --disable-pip``:
nothing is resolved again) against PyPI's advisory data, then OSV's. A package either
service reports vulnerable fails the step (exit 1). A service that cannot be reached, or
that cannot find a package, fails nothing: the step names the packages it could not check,
so a machine without that access (these machines: docs/development.md) is not mistaken
for a clean audit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("FTE_AUDIT_VENV", str(ROOT / ".venv-audit")))
SERVICES = ("pypi", "osv")
DEFAULT_LOCKS = ("requirements/lock.txt", "requirements/lock-py310.txt")


def pip_audit() -> Path | None:
    """Return pip-audit's executable, installing it into VENV when missing (None: failed)."""
    exe = VENV / "bin" / "pip-audit"
    if exe.exists():
        return exe
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
        subprocess.run(
            [str(VENV / "bin" / "pip"), "install", "-q", "pip-audit>=2.7,<3"],
            check=True,
            timeout=600,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"==> vulnerability check NOT RUN: cannot install pip-audit ({exc})")
        return None
    return exe


def summarize(service: str, lock: str, report: dict[str, Any]) -> tuple[list[str], int, int]:
    """Return the lines that say what ``report`` (pip-audit's JSON) checked, how many
    packages it could check and how many vulnerabilities it found in them."""
    deps = report.get("dependencies", [])
    skipped = [d for d in deps if d.get("skip_reason")]
    checked = [d for d in deps if not d.get("skip_reason")]
    vulns = [(d, v) for d in checked for v in d.get("vulns", [])]
    lines = [
        f"{lock} against {service}: checked {len(checked)} of {len(deps)} pinned packages, "
        f"{len(vulns)} known vulnerabilities"
    ]
    if skipped:
        # One reason a line, the message without the package name it ends with.
        reasons = Counter(str(d["skip_reason"]).split(":")[0] for d in skipped)
        for reason, count in reasons.most_common():
            lines.append(f"  NOT CHECKED: {count} packages: {reason}")
    for dep, vuln in vulns:
        fixes = ", ".join(vuln.get("fix_versions") or []) or "none yet"
        aliases = ", ".join(vuln.get("aliases") or [])
        lines.append(
            f"  VULNERABLE: {dep['name']} {dep['version']}: {vuln['id']}"
            f"{f' ({aliases})' if aliases else ''}, fixed in {fixes}"
        )
    return lines, len(checked), len(vulns)


def audit(exe: Path, lock: str, service: str) -> tuple[list[str], int, int]:
    """Run pip-audit on one lock file against one service."""
    with tempfile.TemporaryDirectory(prefix="fte-audit-") as tmp:
        out = Path(tmp) / "report.json"
        proc = subprocess.run(
            [
                *(str(exe), "-r", str(ROOT / lock), "--no-deps", "--disable-pip"),
                *("--progress-spinner", "off", "-s", service, "-f", "json", "-o", str(out)),
            ],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
        if not out.exists() or not out.read_text().strip():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return [f"{lock} against {service}: NOT CHECKED, pip-audit failed: {last[:300]}"], 0, 0
        return summarize(service, lock, json.loads(out.read_text()))


def main(locks: Sequence[str]) -> int:
    exe = pip_audit()
    if exe is None:
        return 0
    found = checked = 0
    print("==> vulnerability check (pip-audit): what it could and could not check")
    for lock in locks:
        for service in SERVICES:
            lines, audited, vulns = audit(exe, lock, service)
            print("\n".join(lines))
            checked, found = checked + audited, found + vulns
    if found:
        print(f"==> {found} known vulnerabilities in locked versions: raise those pins")
        return 1
    if not checked:
        print(
            "==> NOTHING CHECKED: no vulnerability service answered for any package here; "
            "the security floors in pyproject.toml name what was checked by hand"
        )
        return 0
    print("==> no known vulnerability in what could be checked (see NOT CHECKED above)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or DEFAULT_LOCKS))
