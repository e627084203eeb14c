"""deploy/prometheus/: promtool accepts the rules and the scrape config, and the rules'
unit tests pass, with a firing and a quiet case for every alert."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
PROM = ROOT / "deploy" / "prometheus"
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


def alerts() -> dict[str, str]:
    """Alert name -> expression, from deploy/prometheus/alerts.yml."""
    doc = yaml.safe_load((PROM / "alerts.yml").read_text())
    return {r["alert"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


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


class TestCoverage:
    def test_every_alert_has_a_firing_and_a_quiet_case(self) -> None:
        doc = yaml.safe_load((PROM / "alerts_test.yml").read_text())
        cases = [c for t in doc["tests"] for c in t["alert_rule_test"]]
        for name in alerts():
            mine = [c for c in cases if c["alertname"] == name]
            assert any(c["exp_alerts"] for c in mine), f"{name} never fires in a test"
            assert any(not c["exp_alerts"] for c in mine), f"{name} is never quiet in a test"

    @pytest.mark.parametrize(
        "needle",
        [
            'outcome="unavailable"',  # the webhook answering 503
            'state=~"undelivered|failed"',  # deliveries given up
            "fivetran_events_forward_overdue_seconds",  # forwarding lagging
            "fivetran_events_connector_seconds_since_success",  # a connector not synced
            "fivetran_events_connector_overdue_seconds",  # past its own schedule
            "fivetran_events_seconds_since_last_webhook",  # no webhook for a long time
            "fivetran_events_reconciled_total",  # syncs the webhook never delivered
            "fivetran_events_fivetran_webhooks_inactive",  # Fivetran stopped delivering
        ],
    )
    def test_what_on_call_asks_is_alerted_on(self, needle: str) -> None:
        assert any(needle in expr for expr in alerts().values())
