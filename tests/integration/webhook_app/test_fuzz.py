"""Ten thousand correctly signed hostile bodies: never a 500, never a corrupt record.

Seeded and reproducible (``FUZZ_SEED``, ``FUZZ_BODIES`` override the defaults). Runs
in-process against the real Redis for speed; the clock is frozen at ``hostile.NOW`` so
the retention window, and with it what gets recorded, is the same on every run. After
the run every key under the prefix is read back and checked: each sorted-set member
decodes, its score is its own time, the connectors hash holds JSON, and exactly one
dedup mark exists per delivery answered ``recorded``.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from typing import cast

import pytest
import redis
from flask.testing import FlaskClient
from freezegun import freeze_time

from fivetran_events import Settings
from fivetran_events.history import decode_completion
from fivetran_events.history.writer import RECENT_MS
from fivetran_events.keys import CONNECTOR_SETS, ConnectorKeys, connectors_key, last_test_event_key
from fivetran_events.model import (
    FAILURE_STATUSES,
    RESYNC_EVENTS,
    is_derived_sync_id,
    is_valid_id,
    parse_event,
)
from fivetran_events.timeutil import parse_iso
from testkit.support import answer, signed

from .hostile import NOW, hostile_bodies

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("FUZZ_SEED", "20261130"))
BODIES = int(os.environ.get("FUZZ_BODIES", "10000"))
PREFIX = "test:"


def _member_problem(suffix: str, member: bytes, score: float) -> str | None:
    """Say what is wrong with one sorted-set member of a connector, or None."""
    if not math.isfinite(score) or score != int(score):
        return f"score {score!r} is not a whole number of ms"
    if suffix in ("ok", "fail", "other", "okstart"):
        # okstart indexes successes by their attempt's start; the others by end.
        done = decode_completion(member, score, by_start=suffix == "okstart")
        if done.started_ms is not None and done.started_ms > done.ended_ms:
            return f"started {done.started_ms} after it ended {done.ended_ms}"
        if not _sync_id_ok(done.sync_id) or not 0 < len(done.status) <= 64:
            return f"bad sync id or status: {done}"
        if (suffix in ("ok", "okstart")) != done.succeeded:
            return f"{done.status} in the {suffix} set"
        if (suffix == "fail") != (done.status in FAILURE_STATUSES):
            return f"{done.status} in the {suffix} set"
    elif suffix == "resyncs":
        body = json.loads(member)
        if body["e"] not in RESYNC_EVENTS or body["t"] != score:
            return f"bad resync {body} at {score}"
        if not all(isinstance(t, str) for t in body.get("tables", [])):
            return f"bad tables {body}"
    elif suffix == "seen":
        if len(member) != 24 or not all(c in b"0123456789abcdef" for c in member):
            return "dedup id is not 24 hex digits"
    elif not _sync_id_ok(member.decode()):  # starts, running: sync ids
        return "member is not a sync id"
    return None


def _sync_id_ok(sync_id: str) -> bool:
    """A real sync id, or one derived for a sync event that carried none."""
    return is_valid_id(sync_id.removeprefix("~") if is_derived_sync_id(sync_id) else sync_id)


#: What the lifecycle fields of a connector's metadata may hold.
LIFECYCLE_VALUES = {
    "state": {"active", "paused", "deleted"},
    "setup": {"connected", "broken"},
    "change": {"edit_connector", "force_update_connector"},
}


def corrupt_records(client: redis.Redis) -> tuple[int, list[str]]:
    """Read back every key under the prefix; return (records checked, problems)."""
    checked, problems = 0, []
    for key in client.scan_iter(match=PREFIX + "h:*", count=1000):
        connector, _, suffix = key.decode()[len(PREFIX) + 2 :].partition(":")
        if not is_valid_id(connector) or suffix not in CONNECTOR_SETS:
            problems.append(f"{key!r}: unexpected key")
            continue
        for member, score in cast(
            "list[tuple[bytes, float]]", client.zrange(key, 0, -1, withscores=True)
        ):
            checked += 1
            try:
                problem = _member_problem(suffix, member, score)
            except (ValueError, KeyError, TypeError) as exc:
                problem = f"does not decode: {exc!r}"
            if problem:
                problems.append(f"{key!r} {member[:80]!r}: {problem}")
    for connector, raw in cast(
        "dict[bytes, bytes]", client.hgetall(connectors_key(PREFIX))
    ).items():
        checked += 1
        try:
            meta = json.loads(raw)
            parse_iso(meta["last_event_at"])
            assert is_valid_id(connector.decode())
            assert {"name", "type", "group"} <= meta.keys()
            for group, values in LIFECYCLE_VALUES.items():
                if group in meta:
                    assert meta[group] in values, f"{group} {meta[group]!r}"
                    parse_iso(meta[f"{group}_at"])
            if "started_at" in meta:
                parse_iso(meta["started_at"])
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            problems.append(f"connectors[{connector!r}] = {raw[:80]!r}: {exc!r}")
    last = client.get(last_test_event_key(PREFIX))
    if last is not None:
        checked += 1
        try:
            json.loads(last)
        except ValueError as exc:
            problems.append(f"last_test_event {last[:80]!r}: {exc!r}")
    return checked, problems


def missing_marks(client: redis.Redis, recorded: list[bytes]) -> list[str]:
    """The recorded deliveries within RECENT_MS of their connector's newest that lost their mark."""
    events = [parse_event(raw) for raw in recorded]
    newest: dict[str, int] = {}
    for e in events:
        newest[e.connector_id] = max(newest.get(e.connector_id, e.created_ms), e.created_ms)
    return [
        e.dedup_id
        for e in events
        if e.created_ms >= newest[e.connector_id] - RECENT_MS
        and client.zscore(ConnectorKeys(PREFIX, e.connector_id).seen, e.dedup_id) is None
    ]


@pytest.fixture(params=["connector", "tables and lineage"])
def settings(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """The suite's settings (forwarding on), and the same with every optional write of
    the webhook on: per-table deliveries and OpenLineage deliveries for every sync."""
    if request.param == "connector":
        return settings
    return settings.model_copy(update={"asset_granularity": "both", "lineage": "on"})


def test_hostile_signed_bodies_never_500_never_corrupt(
    http: FlaskClient, client: redis.Redis
) -> None:
    bodies = hostile_bodies(SEED, BODIES)
    statuses: Counter[int] = Counter()
    answers: Counter[str] = Counter()
    server_errors: list[bytes] = []
    recorded: list[bytes] = []
    started = time.monotonic()
    with freeze_time(NOW, tick=True):
        for raw in bodies:
            _, headers = signed(raw)
            r = http.post("/webhooks/fivetran", data=raw, headers=headers)
            statuses[r.status_code] += 1
            answers[answer(r)["status"] if r.is_json else "not json"] += 1
            if r.is_json and answer(r)["status"] == "recorded":
                recorded.append(raw)
            if r.status_code >= 500 or not r.is_json:
                server_errors.append(raw[:200])
    elapsed = time.monotonic() - started
    checked, problems = corrupt_records(client)
    seen = sum(client.zcard(k) for k in client.scan_iter(match=PREFIX + "h:*:seen"))
    summary = (
        f"fuzz seed={SEED}: {len(bodies)} signed hostile bodies in {elapsed:.1f}s; "
        f"statuses {dict(sorted(statuses.items()))}; answers {dict(answers)}; "
        f"{len(server_errors)} responses 5xx or not JSON; {checked} stored records "
        f"checked, {len(problems)} corrupt; {seen} dedup marks for "
        f"{answers['recorded']} recorded"
    )
    print("\n" + summary)
    assert len(bodies) >= 10_000 or "FUZZ_BODIES" in os.environ
    assert server_errors == [], f"{summary}; first: {server_errors[:3]}"
    assert problems == [], f"{summary}; first: {problems[:5]}"
    # Dedup marks live RECENT_MS behind their connector's newest event: each recorded
    # delivery that Fivetran could still retry keeps its mark, and no mark is extra.
    assert seen <= answers["recorded"], summary
    assert missing_marks(client, recorded) == [], summary
    assert answers["recorded"] >= len(bodies) // 10, f"too few reached Redis: {summary}"
