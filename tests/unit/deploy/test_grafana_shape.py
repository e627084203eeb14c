"""deploy/grafana/fivetran-events.json is a Grafana dashboard, and the PromQL reader the
metric check uses keeps only metric names (the metrics exported by a running app and
worker: tests/integration/deploy/test_grafana_dashboard.py)."""

from __future__ import annotations

from testkit.deploy_files import dashboard, dashboard_exprs
from testkit.promql import metric_names


class TestShape:
    def test_dashboard_shape(self) -> None:
        d = dashboard()
        assert d["uid"] == "fivetran-events" and d["title"]
        assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36
        variables = {v["name"] for v in d["templating"]["list"]}
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids))
        graphs = [p for p in d["panels"] if p["type"] != "row"]
        assert len(graphs) >= 8
        for p in d["panels"]:
            g = p["gridPos"]
            assert p["title"] and g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24
        for p in graphs:
            assert p["type"] in {"timeseries", "stat", "table", "gauge", "bargauge"}
            assert p["targets"], p["title"]
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), p["title"]
            assert all(t["expr"].strip() for t in p["targets"])
            assert p["datasource"]["uid"].strip("${}") in variables

    def test_promql_names_are_read_out(self) -> None:
        """The extractor drops functions, labels, ranges and grouping, and keeps metrics."""
        assert metric_names(
            'histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y"}'
            "[5m]))) / max without (instance) (b) > 26 * 3600"
        ) == {"a_bucket", "b"}
        names = set().union(*map(metric_names, dashboard_exprs()))
        assert "fivetran_events_forward_deliveries" in names and "le" not in names
