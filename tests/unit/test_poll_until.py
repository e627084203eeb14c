"""testkit's one wait: a deadline, stretched while the awaited work makes progress."""

from __future__ import annotations

import time

import pytest

from testkit.processes import poll_until


def test_progress_stretches_the_deadline_while_the_value_changes() -> None:
    """Work that needs 2.5 timeouts in all but moves all along is waited for."""
    start = time.monotonic()

    def moved() -> int:
        return int((time.monotonic() - start) / 0.05)

    done = poll_until(lambda: time.monotonic() - start >= 0.75, "work", 0.3, 0.01, progress=moved)
    assert done


def test_a_stalled_wait_ends_at_its_timeout_and_a_moving_one_at_four() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="stuck"):
        poll_until(lambda: False, "stuck", 0.2, 0.01, progress=lambda: 0)
    assert 0.2 <= time.monotonic() - started < 0.8
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="endless"):
        poll_until(lambda: False, "endless", 0.2, 0.01, progress=time.monotonic)
    assert time.monotonic() - started >= 0.8
