"""deploy/prometheus/: promtool accepts the rules and the scrape config, and the rules'
unit tests pass (that every alert has a firing and a quiet case, and what the alerts
cover: tests/unit/deploy/test_prometheus_coverage.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from testkit.deploy_files import PROM, alerts

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def promtool(*args: str | Path, cwd: Path = PROM) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


class TestPromtool:
    def test_check_rules(self) -> None:
        out = promtool("check", "rules", "alerts.yml")
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"SUCCESS: {len(alerts())} rules found" in out.stdout

    def test_check_config(self, tmp_path: Path) -> None:
        """With the read API's token in the file the web job names (promtool opens it)."""
        for name in ("prometheus.yml", "alerts.yml"):
            shutil.copy(PROM / name, tmp_path)
        (tmp_path / "fivetran-events-api-token").write_text("a-token-of-the-read-api\n")
        out = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr

    def test_rule_unit_tests_pass(self) -> None:
        out = promtool("test", "rules", "alerts_test.yml")
        assert out.returncode == 0, out.stdout + out.stderr
        assert "SUCCESS" in out.stdout

    def test_unit_tests_catch_a_changed_threshold(self, tmp_path: Path) -> None:
        """The unit tests pin the thresholds: a rule that would never fire fails them."""
        shutil.copy(PROM / "alerts_test.yml", tmp_path)
        text = (PROM / "alerts.yml").read_text()
        assert "> 6 * 3600" in text
        (tmp_path / "alerts.yml").write_text(text.replace("> 6 * 3600", "> 60 * 3600"))
        out = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
        assert out.returncode != 0
        assert "FivetranEventsNoWebhooks" in out.stdout + out.stderr
