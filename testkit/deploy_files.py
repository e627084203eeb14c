"""deploy/'s files as the tests read them: paths, the alerts' rules, the dashboard."""

from __future__ import annotations

import json
from typing import Any

import yaml

from testkit.imports import ROOT

DEPLOY = ROOT / "deploy"
PROM = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "fivetran-events.json"
ALERTS = PROM / "alerts.yml"
#: The systemd units deploy/ ships.
UNITS = sorted(DEPLOY.glob("*.service"))


def rules() -> list[dict[str, Any]]:
    """Every rule of deploy/prometheus/alerts.yml (alerting and recording)."""
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def alerts() -> dict[str, str]:
    """Alert name -> expression."""
    return {r["alert"]: r["expr"] for r in rules() if "alert" in r}


def alert_exprs() -> list[str]:
    """Every rule's expression, recording rules' too."""
    return [r["expr"] for r in rules()]


def dashboard() -> dict[str, Any]:
    """deploy/grafana/fivetran-events.json."""
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def dashboard_exprs() -> list[str]:
    """Every panel target's PromQL expression."""
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]
