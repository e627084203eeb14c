"""bench/sensor.py's sampling: the cases it compares take turns, so drift hits each alike."""

from __future__ import annotations

import pytest

from bench.sensor import _sample, parse_args


class TestInterleavedSampling:
    def test_cases_take_turns_in_a_rotating_order(self) -> None:
        """Each round times every case once, the first case moving round by round."""
        calls: list[tuple[str, int]] = []
        cases = {
            key: (lambda target, k=key: calls.append((k, target)), lo, lo + 99)
            for key, lo in (("small", 0), ("big", 1000), ("other", 5000))
        }
        lat = _sample(cases, samples=4, budget_s=60.0)
        assert [k for k, _ in calls] == [
            *("small", "big", "other"),
            *("big", "other", "small"),
            *("other", "small", "big"),
            *("small", "big", "other"),
        ]
        for key, target in calls:
            _, lo, hi = cases[key]
            assert lo <= target <= hi
        assert {k: len(v) for k, v in lat.items()} == {"small": 4, "big": 4, "other": 4}
        assert all(us >= 0 for v in lat.values() for us in v)

    def test_budget_ends_every_case_together(self) -> None:
        """Out of time, the sampling stops after a whole round: the cases keep equal counts."""
        cases = {k: (lambda target: None, 0, 10) for k in ("a", "b")}
        lat = _sample(cases, samples=10**9, budget_s=0.05)
        assert 0 < len(lat["a"]) == len(lat["b"]) < 10**9


class TestCommands:
    @pytest.mark.parametrize(
        ("argv", "commands"),
        [
            ([], ["history", "provider"]),
            (["local", "--quick"], ["history", "provider"]),
            (["history"], ["history"]),
            (["provider", "--trials", "2"], ["provider"]),
            (["scale", "--sensors", "10"], ["scale"]),
            (["--scale", "--quick"], ["scale"]),
            (["--backfill-cost", "--runs", "40"], ["backfill-cost"]),
            (["--scale", "--backfill-cost"], ["backfill-cost", "scale"]),
        ],
    )
    def test_subcommands_and_the_older_flags_choose_the_sections(
        self, argv: list[str], commands: list[str]
    ) -> None:
        """One module runs every section; `--scale` and `--backfill-cost` still work."""
        assert parse_args(argv).commands == commands
