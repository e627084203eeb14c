"""``fivetran_events_reconciled_total{connector}``: one series per connector, up to a cap."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from webhook_app import metrics


def value(connector: str) -> float:
    got = REGISTRY.get_sample_value("fivetran_events_reconciled_total", {"connector": connector})
    return got or 0.0


def test_past_the_cap_connectors_count_as_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_reconciled_seen", set())
    monkeypatch.setattr(metrics, "RECONCILED_CONNECTORS_CAP", 2)
    before = {c: value(c) for c in ("cap_a", "cap_b", "cap_c", "OTHER")}
    for connector in ("cap_a", "cap_b", "cap_a", "cap_c", "cap_c"):
        metrics.count_reconciled(connector)
    after = {c: value(c) - before[c] for c in before}
    assert after == {"cap_a": 2, "cap_b": 1, "cap_c": 0, "OTHER": 2}
