"""A seeded generator of hostile webhook bodies (the fuzz test signs each correctly).

Reproducible: the same seed gives the same bodies, with times relative to ``NOW``
(the test freezes the clock there, so the retention cut-off is the same on every run).
The mix leans towards bodies that are nearly valid, since those reach the history
write, where corruption would happen.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from fivetran_events.timeutil import iso
from testkit.support import payload

#: The fuzz's wall clock (frozen by the test).
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
EVENTS = [
    "sync_end",
    "sync_start",
    "resync_table",
    "resync_connector",
    "test_event",
    "pause_connector",
    "pause_connection",
    "resume_connector",
    "delete_connection",
    "create_connector",
    "edit_connector",
    "force_update_connection",
    "connection_successful",
    "connection_failure",
    "dbt_run_succeeded",
    "",
]
STATUSES = [
    "SUCCESSFUL",
    "FAILURE",
    "FAILURE_WITH_TASK",
    "FAILED",
    "RESCHEDULED",
    "CANCELED",
    "SOMETHING_FIVETRAN_ADDS",
    "successful",
    "SUCCESS",
    " SUCCESSFUL",
    "SUCCESSFUL\u0000",
    "",
]
ODD_TEXT = [
    "",
    " ",
    "\u0000",
    "\ud800",
    "\udfff",
    "a\ud83d",
    "\ud83d\ude00" * 3,
    "\u202e",
    "e\u0301",
    "\ufeff",
    "\\",
    '"',
    "null",
    "NaN",
    "../../etc/passwd",
    "a:b",
    "test:h:x:ok",
    "*",
    "%s%n",
    "<script>",
    "\n\r\t",
    "ß" * 64,
    "x" * 129,
    "x" * 128,
    "_",
    "_connector_1",
    "~derived",
    ".",
    "-",
    "0" * 128,
]
ODD_TIMES = [
    "2026-01-01",
    "2026-01-01T00:00:00",
    "2026-13-45T00:00:00Z",
    "2026-02-29T00:00:00Z",
    "2024-02-29T23:59:60Z",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-14:00",
    "0001-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
    "2026-01-01T00:00:00.123456789Z",
    "2026-01-01T00:00:00+25:00",
    "2026-01-01t00:00:00z",
    "20260101T000000Z",
    "  2026-01-01T00:00:00Z  ",
    "2026-W01-1",
    "yesterday",
    "1767225600",
    "-1",
    "\u0662\u0660\u0662\u0666",
]


def _time(rng: random.Random) -> str:
    """A plausible ``created`` (within the retention, so it is recorded) or an odd one."""
    if rng.random() < 0.8:
        when = NOW - timedelta(days=rng.uniform(0, 700), milliseconds=rng.randint(0, 999))
        text = iso(when) or ""
        return text.replace("Z", rng.choice(["Z", "+00:00", "z"]))
    return rng.choice(ODD_TIMES)


def _scalar(rng: random.Random) -> Any:
    makers: list[Callable[[], Any]] = [
        lambda: 10 ** rng.randint(19, 400) * rng.choice([1, -1]),
        lambda: rng.choice([float("nan"), float("inf"), float("-inf"), 1e308, -0.0, 5e-324]),
        lambda: rng.choice([True, False, None, 0, -1, 2**63, 2**64]),
        lambda: rng.choice(ODD_TEXT),
        lambda: "".join(chr(rng.randint(1, 0x2FFFF)) for _ in range(rng.randint(1, 40))),
        lambda: "x" * rng.randint(200, 9000),
        lambda: _time(rng),
    ]
    return rng.choice(makers)()


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.6:
        return _scalar(rng)
    if roll < 0.8:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {
        rng.choice(["status", "reason", "tables", "x", ""]): _value(rng, depth + 1)
        for _ in range(rng.randint(0, 4))
    }


def _id(rng: random.Random) -> str:
    return (
        rng.choice(["c1", "c2", "assimilate_seem", "c.3", "c-4", "C_5"])
        if rng.random() < 0.85
        else rng.choice(ODD_TEXT)
    )


def realistic(rng: random.Random) -> dict[str, Any]:
    """A payload shaped like Fivetran's, with odd but possible values."""
    event = rng.choice(EVENTS[:5])
    extra: dict[str, Any] = {}
    if rng.random() < 0.3:
        extra["reason"] = rng.choice([*ODD_TEXT, "quota exceeded"])
    if event.startswith("resync") or rng.random() < 0.1:
        extra["tables"] = [
            rng.choice([*ODD_TEXT, "t1", "public.orders"]) for _ in range(rng.randint(0, 3))
        ]
    body = payload(
        event,
        connector_id=_id(rng),
        created=_time(rng),
        sync_id=rng.choice([f"s{rng.randint(0, 400)}", "x" * 128, "a.b-c_d"]),
        status=rng.choice(STATUSES[:5] if rng.random() < 0.8 else STATUSES),
        new_names=rng.random() < 0.3,
        **extra,
    )
    if rng.random() < 0.3:
        body[
            rng.choice(
                ["connector_name", "connector_type", "destination_group_id", "connection_name"]
            )
        ] = rng.choice(ODD_TEXT)
    return body


def near_valid(rng: random.Random) -> dict[str, Any]:
    """A realistic payload with one or two fields broken, removed or of the wrong type."""
    body = realistic(rng)
    for _ in range(rng.randint(1, 2)):
        target = body
        if "data" in body and isinstance(body["data"], dict) and rng.random() < 0.4:
            target = body["data"]
        key = rng.choice([*target.keys(), "sync_id", "created", "event", "status", "data"])
        if rng.random() < 0.15:
            target.pop(key, None)
        else:
            target[key] = _value(rng)
    return body


def deep(rng: random.Random) -> bytes:
    """Nesting deep enough to exhaust a recursive parser, inside the size limit."""
    n = rng.randint(900, 20_000)
    if rng.random() < 0.5:
        return b"[" * n + b"]" * n
    inner = b'{"data":' * n + b"{}" + b"}" * n
    return b'{"event":"sync_end","created":"2026-01-01T00:00:00Z","data":' + inner + b"}"


def duplicate_keys(rng: random.Random) -> bytes:
    """The same key twice: the JSON parser keeps the last, a signature covers both."""
    body = realistic(rng)
    text = json.dumps(body)[:-1]
    key = rng.choice(["event", "connector_id", "sync_id", "created", "data"])
    return (text + f', "{key}": ' + json.dumps(_value(rng)) + "}").encode()


def wrong_top_level(rng: random.Random) -> bytes:
    return json.dumps(
        rng.choice([[realistic(rng)], "sync_end", 42, None, True, [], 1e308, float("nan")])
    ).encode()


def raw_bytes(rng: random.Random) -> bytes:
    """Not JSON, not UTF-8, another encoding, or JSON cut short or with trailing junk."""
    text = json.dumps(realistic(rng))
    makers: list[Callable[[], bytes]] = [
        lambda: bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300))),
        lambda: b"\xef\xbb\xbf" + text.encode(),
        lambda: text.encode("utf-16"),
        lambda: text.encode("utf-32"),
        lambda: text.encode()[: rng.randint(0, len(text) - 1)],
        lambda: text.encode() + rng.choice([b"}", b" garbage", b"\x00", b"{}"]),
        lambda: text.replace('"', "'").encode(),
        lambda: text.encode().replace(b"e", b"\xff", 1),
        lambda: b"",
    ]
    return rng.choice(makers)()


GENERATORS: list[tuple[float, Callable[[random.Random], dict[str, Any] | bytes]]] = [
    (0.35, realistic),
    (0.35, near_valid),
    (0.05, deep),
    (0.08, duplicate_keys),
    (0.05, wrong_top_level),
    (0.12, raw_bytes),
]


def hostile_bodies(seed: int, count: int) -> list[bytes]:
    """``count`` hostile bodies, the same for the same seed."""
    rng = random.Random(seed)
    weights = [w for w, _ in GENERATORS]
    out = []
    for _ in range(count):
        [gen] = rng.choices([g for _, g in GENERATORS], weights=weights)
        body = gen(rng)
        out.append(body if isinstance(body, bytes) else json.dumps(body).encode())
    return out
