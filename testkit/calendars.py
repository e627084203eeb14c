"""The seed's two calendars, which the decision, the API, the CLI and the sensor must show.

Today being Jan 15, a @daily DAG backfilled from Jan 1 (docs/decision.md).
"""

from __future__ import annotations

from .support import at

# Scenario A: last success Jan 10, last failure Jan 12; B: last success Jan 10, failure Jan 2.
SCENARIO_A = [("a-ok", at(10, 6), "SUCCESSFUL"), ("a-fail", at(12, 6), "FAILURE")]
SCENARIO_B = [("b-fail", at(2, 6), "FAILURE"), ("b-ok", at(10, 6), "SUCCESSFUL")]

# The seed calendars: target (midnight of Jan N) -> outcome, today being Jan 15.
S, F, W = "success", "fail", "wait"
CALENDARS = {
    ("A", True): {**{d: S for d in range(1, 11)}, 11: F, 12: F, 13: F, 14: F, 15: F},
    ("A", False): {**{d: S for d in range(1, 11)}, 11: F, 12: F, 13: W, 14: W, 15: W},
    ("B", True): {**{d: S for d in range(1, 11)}, **{d: W for d in range(11, 16)}},
    ("B", False): {**{d: S for d in range(1, 11)}, **{d: W for d in range(11, 16)}},
}
