"""deploy/'s files as the tests read them: paths, and the alerts' rules."""

from __future__ import annotations

import yaml

from testkit.imports import ROOT

DEPLOY = ROOT / "deploy"
PROM = DEPLOY / "prometheus"
#: The systemd units deploy/ ships.
UNITS = sorted(DEPLOY.glob("*.service"))


def alerts() -> dict[str, str]:
    """Alert name -> expression, from deploy/prometheus/alerts.yml."""
    doc = yaml.safe_load((PROM / "alerts.yml").read_text())
    return {r["alert"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "alert" in r}
