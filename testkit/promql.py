"""Read the metric names out of PromQL expressions (the dashboard's and the alerts')."""

from __future__ import annotations

import re

#: PromQL words that look like names but are not metrics.
KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
    }
)


def metric_names(expr: str) -> set[str]:
    """Return every metric name ``expr`` selects (functions, labels and keywords dropped)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = re.findall(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", text)
    return {n for n in names if n.lower() not in KEYWORDS}
