"""The "Fivetran syncs" view in a real browser: Debian's chromium driven by Playwright.

The browser logs in to the session's real Airflow (a JWT from ``POST /auth/token`` as
the ``_token`` session cookie, the one Airflow's own login sets), opens Airflow's UI
page of the view and the view itself for histories A and B, and reads each calendar
cell's decision and computed color; they must match the manual's table (docs/decision.md).
Screenshots
are kept under the test's tmp path; ``FTE_UPDATE_SCREENSHOT=1`` also rewrites the one
the manual shows (docs/img/fivetran-syncs.png, on docs/ui.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from flask.testing import FlaskClient

from testkit.airflow_harness import AirflowServer
from testkit.calendars import CALENDARS, SCENARIO_A, SCENARIO_B
from testkit.support import at, deliver, payload

from .dagtest import PAGE, seed, sync

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DECISION_PAGE = Path(__file__).parents[3] / "docs" / "decision.md"
SCREENSHOT = Path(__file__).parents[3] / "docs" / "img" / "fivetran-syncs.png"
#: The view's colors (airflow_plugin/ui/templates/base.html) as the browser computes them.
COLORS = {
    "success": "rgb(46, 125, 50)",
    "fail": "rgb(198, 40, 40)",
    "wait": "rgb(249, 168, 37)",
}


def manual_calendar(scenario: str, propagate: bool) -> dict[int, str]:
    """Read the manual's table of the seed's histories: day of January -> decision."""
    row = next(
        line for line in DECISION_PAGE.read_text().splitlines() if line.startswith(f"| {scenario}:")
    )
    spans = [c.strip() for c in row.strip("|").split("|")[1:]]
    days = [range(1, 11), range(11, 13), range(13, 16)]  # the header's three columns
    out = {}
    for span, text in zip(days, spans, strict=True):
        with_prop, _, without = text.partition(" (")
        first = re.match(r"(\w+)", without)
        word = first.group(1) if first and not propagate else with_prop
        out.update(dict.fromkeys(span, word))
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert os.access(CHROMIUM, os.X_OK), "deploy/ensure-test-tools.sh installs chromium"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, airflow3: AirflowServer) -> Iterator[Any]:
    """A browser tab logged in to Airflow (its session cookie holds Airflow's JWT)."""
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    context.add_cookies([{"name": "_token", "value": airflow3.token(), "url": airflow3.url}])
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    try:
        yield tab
    finally:
        context.close()


def cells(page: Any) -> list[dict[str, str]]:
    return cast(
        "list[dict[str, str]]",
        page.eval_on_selector_all(
            ".day[data-decision]",
            """els => els.map(e => ({target: e.dataset.target, decision: e.dataset.decision,
                                color: getComputedStyle(e).backgroundColor}))""",
        ),
    )


class TestInTheBrowser:
    def test_calendar_colors_are_the_manual_table(
        self, page: Any, airflow3: AirflowServer, http: FlaskClient, tmp_path: Path
    ) -> None:
        """Histories A and B, propagation on and off: each day's cell in its color."""
        seed(http, "ui_a", SCENARIO_A)
        seed(http, "ui_b", SCENARIO_B)
        for scenario, propagate in CALENDARS:
            cid = f"ui_{scenario.lower()}"
            flag = str(propagate).lower()
            resp = page.goto(f"{airflow3.url}{PAGE.format(cid)}&propagate_failures_forward={flag}")
            assert resp.status == 200, resp.status
            got = cells(page)
            assert [c["target"] for c in got] == [
                f"2026-01-{d:02d}T00:00:00.000Z" for d in range(1, 16)
            ]
            want = manual_calendar(scenario, propagate)
            assert want == CALENDARS[(scenario, propagate)], "manual and decision tests differ"
            assert [c["decision"] for c in got] == [want[d] for d in range(1, 16)]
            assert [c["color"] for c in got] == [COLORS[want[d]] for d in range(1, 16)]
            fills = page.eval_on_selector_all(
                "rect.sync", "els => els.map(e => [e.dataset.status, getComputedStyle(e).fill])"
            )
            assert sorted(fills) == sorted(
                [
                    ["SUCCESSFUL", COLORS["success"]],
                    ["FAILURE", COLORS["fail"]],
                ]
            )
            page.screenshot(path=str(tmp_path / f"{cid}-{flag}.png"), full_page=True)

    def test_airflow_ui_shows_the_view_in_its_navigation(
        self, page: Any, airflow3: AirflowServer, http: FlaskClient, tmp_path: Path
    ) -> None:
        """Airflow's own page frames the list; clicks open a connector, then a day."""
        seed(http, "ui_a", SCENARIO_A)
        seed(http, "ui_b", SCENARIO_B)
        page.goto(f"{airflow3.url}/plugin/fivetran-syncs")
        frame = page.frame_locator("iframe")
        frame.locator('tr[data-connector="ui_a"] a').click()
        frame.locator("#calendar").wait_for()
        # The default range ends today, far from January: ask for the seed's fortnight.
        frame.locator('input[name="start"]').fill("2026-01-01")
        frame.locator('input[name="end"]').fill("2026-01-15")
        frame.locator('button[type="submit"]').click()
        frame.locator('.day[data-target="2026-01-11T00:00:00.000Z"]').click()
        decision = frame.locator("#decision")
        decision.wait_for()
        assert decision.get_attribute("data-decision") == "fail"
        assert "a-fail" in decision.inner_text()
        shot = tmp_path / "fivetran-syncs.png"
        page.screenshot(path=str(shot))
        if os.environ.get("FTE_UPDATE_SCREENSHOT") == "1":
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            SCREENSHOT.write_bytes(shot.read_bytes())

    def test_the_legend_and_wait_when_paused_for_a_paused_connector(
        self, page: Any, airflow3: AirflowServer, http: FlaskClient, tmp_path: Path
    ) -> None:
        """The legend's rules are shown; choosing wait_when_paused in the form turns the
        paused days from fail (red) to wait (amber)."""
        sync(http, "ui_paused", at(10, 6), sync_id="p-ok", started=at(10, 5))
        deliver(http, payload("pause_connector", "ui_paused", at(11, 8, 30)))
        resp = page.goto(f"{airflow3.url}{PAGE.format('ui_paused')}")
        assert resp.status == 200, resp.status
        rules = page.locator("#decision-rules")
        assert rules.is_visible()
        text = " ".join(rules.inner_text().split())
        for words in (
            "A paused or deleted connector makes the decision fail",
            "unless wait_when_paused",
            "A RESCHEDULED latest end makes it wait until Fivetran's rescheduledAt",
            "CANCELED and unknown statuses are neither success nor failure",
        ):
            assert words in text, text
        late = [c for c in cells(page) if c["target"] >= "2026-01-11"]
        assert {(c["decision"], c["color"]) for c in late} == {("fail", COLORS["fail"])}
        page.select_option('select[name="wait_when_paused"]', "true")
        page.locator('button[type="submit"]').click()
        page.wait_for_url("**wait_when_paused=true**")
        late = [c for c in cells(page) if c["target"] >= "2026-01-11"]
        assert len(late) == 5
        assert {(c["decision"], c["color"]) for c in late} == {("wait", COLORS["wait"])}
        page.screenshot(path=str(tmp_path / "ui_paused-wait.png"), full_page=True)
