"""deploy/prometheus/alerts_test.yml has a firing and a quiet case for every alert, and the
alerts cover what on-call asks about (promtool runs them: tests/integration/deploy/)."""

from __future__ import annotations

import pytest
import yaml

from testkit.deploy_files import PROM, alerts


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
