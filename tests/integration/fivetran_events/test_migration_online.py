"""A v1 history of 10^5 syncs migrated online, killed once, resumed: every decision holds.

0.1's write script (frozen in ``testkit/history_v1.py``) writes the history; the v1
reads give the decision a 0.1 sensor gave for many targets, both criteria and every
flag. The migration then runs as the CLI in a subprocess, next to a real webhook server
on the same Redis taking a trickle of signed deliveries (new syncs of the same
connectors dated after every target, and redeliveries of migrated syncs); it is
SIGKILLed midway and run again. Afterwards the current reader's decisions equal 0.1's
(with the trickle's later syncs added to 0.1's facts), the v1 keys are gone and every
trickle delivery is there.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from fivetran_events import HistoryReader
from fivetran_events.decision import Completion, Criterion, Decision, Facts, RunningSync, decide
from fivetran_events.timeutil import iso, now_ms, parse_iso, to_ms
from testkit.history_v1 import HOUR_MS, V1History, facts_v1, history_v1_fixture
from testkit.processes import poll_until, stop_group
from testkit.servers import webhook_server
from testkit.support import SECRET, WEBHOOK_PATH, payload, signed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PREFIX = "test:"
CONNECTORS = 100
SYNCS_PER_CONNECTOR = 1000
DAY_MS = 24 * HOUR_MS
FLAGS = [(p, w) for p in (True, False) for w in (False, True)]


@dataclass(frozen=True)
class Clock:
    """A reader's ``now`` and maximum sync duration (which syncs count as running)."""

    now_ms: int
    max_sync_duration_ms: int


@dataclass(frozen=True)
class Question:
    connector: str
    target_ms: int
    criterion: Criterion
    clock: Clock
    propagate: bool
    always_wait: bool


def targets(hist: V1History, connector: str, rng: random.Random) -> list[int]:
    """Before, inside and after the history; exactly at starts and ends, and 1 ms off."""
    times = hist.boundaries[connector]
    picked = rng.sample(times, 8) + times[-3:] + times[:2]
    out = {hist.first_ms - DAY_MS, hist.last_ms + HOUR_MS, hist.last_ms + 5 * DAY_MS}
    out |= {t + d for t in picked for d in (-1, 0, 1)}
    out |= {rng.randrange(hist.first_ms, hist.last_ms) for _ in range(4)}
    return sorted(out)


def with_later(facts: Facts, later: list[Completion]) -> Facts:
    """0.1's facts plus completions that ended after the target (the trickle's syncs)."""
    assert all(c.ended_ms > facts.target_ms for c in later)
    failures = [c for c in later if c.failed]
    return replace(
        facts,
        successes_from_target=(
            *facts.successes_from_target,
            *sorted((c for c in later if c.succeeded), key=Completion.order_key),
        ),
        first_failure_from_target=facts.first_failure_from_target
        or min(failures, key=Completion.order_key, default=None),
    )


@dataclass(frozen=True)
class Trickle:
    """New syncs (start, then end) for the webhook while the migration runs."""

    connector: str
    sync_id: str
    started_ms: int
    ended_ms: int
    status: str

    def bodies(self) -> list[dict[str, Any]]:
        c, s = self.connector, self.sync_id
        start = payload("sync_start", c, iso(self.started_ms), s)
        end = payload("sync_end", c, iso(self.ended_ms), s, self.status)
        if self.status != "SUCCESSFUL":
            end["data"]["reason"] = "disk full"
        return [start, end]

    def completion(self) -> Completion:
        ok = self.status == "SUCCESSFUL"
        return Completion(
            self.sync_id,
            self.status,
            self.ended_ms,
            ok,
            None if ok else "disk full",
            None,
            self.started_ms,
        )


def trickle_syncs(hist: V1History, after_ms: int, count: int) -> list[Trickle]:
    step = (now_ms() - HOUR_MS - after_ms) // (count + 1)
    out = []
    for i in range(count):
        connector = hist.connectors[(i * 7) % len(hist.connectors)]
        start = after_ms + (i + 1) * step
        status = "FAILURE" if i % 4 == 3 else "SUCCESSFUL"
        out.append(Trickle(connector, f"trickle-{i}", start, start + 60_000, status))
    return out


def redeliveries(hist: V1History, count: int) -> list[dict[str, Any]]:
    """sync_end bodies of successes already in the v1 history (their content as 0.1 saw it)."""
    ends = [
        e
        for e in hist.events
        if e.event == "sync_end" and e.status == "SUCCESSFUL" and e.connector_id in hist.connectors
    ]
    picked = ends[:: max(1, len(ends) // count)][:count]
    return [
        payload(
            "sync_end", created=iso(e.created_ms), connector_id=e.connector_id, sync_id=e.sync_id
        )
        for e in picked
    ]


class Poster(threading.Thread):
    """POST signed bodies to the webhook one by one, noting how many went while migrating."""

    def __init__(self, base: str, bodies: list[dict[str, Any]], migrating: threading.Event):
        super().__init__(daemon=True)
        self.base, self.bodies, self.migrating = base, bodies, migrating
        self.answers: list[str] = []
        self.during = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with requests.Session() as http:
                for body in self.bodies:
                    raw, headers = signed(body, SECRET)
                    resp = http.post(
                        self.base + WEBHOOK_PATH, data=raw, headers=headers, timeout=30
                    )
                    assert resp.status_code == 200, resp.text
                    self.answers.append(resp.json()["status"])
                    if self.migrating.is_set():
                        self.during += 1
                        time.sleep(0.1)  # paced: a trickle, not a load test
        except BaseException as exc:  # reported by the test thread
            self.error = exc


def run_cli(env: dict[str, str], tmp: Path, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "webhook_app", "migrate", "--json"],
        env=env,
        stdout=(tmp / f"{name}.out").open("wb"),
        stderr=(tmp / f"{name}.err").open("wb"),
        start_new_session=True,
    )


def test_v1_history_of_1e5_syncs_migrates_online_and_decides_the_same(
    redis_url: str, client: redis.Redis, tmp_path: Path
) -> None:
    """Killed midway and resumed, under a trickle of deliveries: every decision is 0.1's."""
    hist = history_v1_fixture(
        client,
        PREFIX,
        CONNECTORS,
        SYNCS_PER_CONNECTOR,
        now_ms() - (SYNCS_PER_CONNECTOR * HOUR_MS + 20 * DAY_MS),
    )
    assert hist.syncs == 100_000

    rng = random.Random(3)
    clocks = [
        Clock(hist.last_ms + 10 * 60_000, DAY_MS),  # the newest start counts as running
        Clock(hist.last_ms + 2 * HOUR_MS, HOUR_MS),  # nothing runs any more
        Clock(hist.last_ms + HOUR_MS, 1000 * DAY_MS),  # even the lost sync still runs
    ]
    facts: dict[tuple[str, int, Criterion, Clock], Facts] = {}
    for c in hist.connectors:
        for t in targets(hist, c, rng):
            for crit in Criterion:
                for clock in clocks:
                    facts[(c, t, crit, clock)] = facts_v1(
                        client,
                        PREFIX,
                        c,
                        t,
                        clock.now_ms - clock.max_sync_duration_ms,
                        crit is Criterion.STARTED_AFTER,
                    )
    largest = max(t for (_c, t, _crit, _clock) in facts)
    trickle = trickle_syncs(hist, largest + HOUR_MS, 150)
    later: dict[str, list[Completion]] = {}
    for tr in trickle:
        later.setdefault(tr.connector, []).append(tr.completion())
    expected: dict[Question, Decision] = {}
    for (c, t, crit, clock), f in facts.items():
        merged = with_later(f, later.get(c, []))
        for propagate, wait in FLAGS:
            expected[Question(c, t, crit, clock, propagate, wait)] = decide(
                merged,
                propagate_failures_forward=propagate,
                always_wait_when_syncing=wait,
                criterion=crit,
            )
    outcomes = {d.outcome for d in expected.values()}
    assert len(outcomes) == 3, outcomes  # the targets reach success, fail and wait
    assert any(isinstance(d.sync, RunningSync) for d in expected.values())

    env = {
        **os.environ,
        "FIVETRAN_EVENTS_REDIS_URL": redis_url,
        "FIVETRAN_EVENTS_KEY_PREFIX": PREFIX,
        "FIVETRAN_EVENTS_WEBHOOK_SECRETS": SECRET,
    }
    bodies = [b for tr in trickle for b in tr.bodies()]
    dups = redeliveries(hist, 20)
    mixed = bodies[:]
    for i, dup in enumerate(dups):  # spread the redeliveries through the trickle
        mixed.insert((i + 1) * len(bodies) // (len(dups) + 1) + i, dup)

    migrating = threading.Event()
    with webhook_server(redis_url, tmp_path) as (base, _server):
        poster = Poster(base, mixed, migrating)
        migrating.set()
        poster.start()
        first = run_cli(env, tmp_path, "first")
        try:

            def midway() -> bool:
                assert first.poll() is None, "the first run ended before it was killed"
                return int(client.scard(f"{PREFIX}migrate:done")) >= 30

            poll_until(
                midway,
                "the first run to migrate 30 connectors",
                timeout=300,
                details=lambda: (tmp_path / "first.err").read_text()[-2000:],
            )
        finally:
            stop_group(first, timeout=0, sig=signal.SIGKILL)
        assert first.returncode == -signal.SIGKILL
        left = {k for k in client.scan_iter(match=f"{PREFIX}c:*", count=1000)}
        assert left, "the kill came after the end: nothing left to resume"

        second = run_cli(env, tmp_path, "second")
        try:
            assert second.wait(timeout=600) == 0, (tmp_path / "second.err").read_text()[-3000:]
        finally:
            stop_group(second)
        migrating.clear()
        poster.join(timeout=120)
        assert not poster.is_alive() and poster.error is None, poster.error

    summary = json.loads((tmp_path / "second.out").read_text())
    progress = (tmp_path / "second.err").read_text()
    print("\n" + progress.strip().splitlines()[-1])
    print(
        f"second run: {summary['syncs']} syncs of {summary['connectors']} connectors in "
        f"{summary['seconds']} s ({summary['resumed_connectors']} connectors done before the kill)"
    )
    assert summary["resumed_connectors"] >= 30 and summary["connectors"] < CONNECTORS
    assert "syncs/s" in progress and "ETA" in progress
    assert f"resuming after {summary['resumed_connectors']} done" in progress
    assert poster.during > 0, "no delivery arrived while the migration ran"
    assert len(poster.answers) == len(mixed)

    # v1 is gone, the migration's own keys too; the layout is marked.
    assert list(client.scan_iter(match=f"{PREFIX}c:*", count=1000)) == []
    assert list(client.scan_iter(match=f"{PREFIX}migrate:*", count=1000)) == []
    assert client.get(f"{PREFIX}layout") == b"2"

    # Every trickle sync and every redelivered one is there, each once.
    for c in {tr.connector for tr in trickle}:
        listed = HistoryReader(client, PREFIX, DAY_MS).syncs(c, since_ms=largest, limit=1000)
        assert sorted(s["sync_id"] for s in listed) == sorted(
            tr.sync_id for tr in trickle if tr.connector == c
        )
    for dup in dups:
        ended = to_ms(parse_iso(dup["created"]))
        listed = HistoryReader(client, PREFIX, DAY_MS).syncs(
            dup["connector_id"], since_ms=ended, until_ms=ended
        )
        assert [(s["sync_id"], s["status"]) for s in listed if s["status"] != "RUNNING"] == [
            (dup["sync_id"], "SUCCESSFUL")
        ]

    mismatches = []
    readers = {clock: HistoryReader(client, PREFIX, clock.max_sync_duration_ms) for clock in clocks}
    for q, want in expected.items():
        got = readers[q.clock].decide(
            q.connector,
            q.target_ms,
            criterion=q.criterion,
            propagate_failures_forward=q.propagate,
            always_wait_when_syncing=q.always_wait,
            now=q.clock.now_ms,
        )
        if got != want:
            mismatches.append((q, want, got))
    assert mismatches == [], f"{len(mismatches)} of {len(expected)} differ, e.g. {mismatches[:3]}"
    print(f"{len(expected)} decisions compared: identical")
