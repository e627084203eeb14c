"""What the migration knows of a prefix's keys: v1's, the current layout's, shared ones.

It refuses (``UnknownKeys``) when a key under the prefix is none of these: a wrong
prefix or another application's keys must not be taken for history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import redis

from ..exceptions import ConfigurationError
from ..model import is_valid_id
from ..redis_url import as_text

#: The layout this release writes; ``{p}layout`` holds it once a migration has ended.
LAYOUT_VERSION = "2"

#: v1's per-connector sets (``guard`` is never stored, but a crash could leave one).
V1_SUFFIXES = frozenset(
    ("ok", "okstart", "fail", "ends", "ended", "starts", "running", "resyncs", "seen", "guard")
)
#: Keys both layouts share, by name after the prefix.
SHARED_KEYS = frozenset(("connectors", "last_test_event", "readyz", "layout", "reconcile"))
#: The current layout's namespace after the prefix: every per-connector key is under it.
CURRENT_NAMESPACE = "h:"
#: Shared namespaces: forwarding records (not migrated, only recognised), the
#: migration's own progress and reconcile's schedule (keys.reconcile_period_key).
SHARED_NAMESPACES = ("fwd:", "migrate:", "reconcile:")
#: RQ's own keys; they fall under the prefix only when the prefix is empty or ``r``.
RQ_NAMESPACE = "rq:"
#: How many unknown keys a refusal names.
UNKNOWN_SHOWN = 10


class KeyKind(str, Enum):
    V1 = "v1"
    CURRENT = "current"
    SHARED = "shared"
    FOREIGN = "foreign"
    UNKNOWN = "unknown"


def classify(prefix: str, key: str) -> tuple[KeyKind, str | None]:
    """Say what ``key`` is to the migration, and its connector when it is v1 history.

    FOREIGN is outside the prefix (or RQ's own keys under an empty prefix): not ours to
    judge. UNKNOWN is under the prefix and matches no layout: the migration refuses.
    """
    if prefix and not key.startswith(prefix):
        return KeyKind.FOREIGN, None
    rest = key[len(prefix) :]
    if key.startswith(RQ_NAMESPACE) and not prefix.startswith(RQ_NAMESPACE):
        return KeyKind.FOREIGN, None
    if rest in SHARED_KEYS or rest.startswith(SHARED_NAMESPACES):
        return KeyKind.SHARED, None
    if rest.startswith(CURRENT_NAMESPACE):
        return KeyKind.CURRENT, None
    if rest.startswith("c:"):
        connector, _, suffix = rest[2:].rpartition(":")
        if suffix in V1_SUFFIXES and is_valid_id(connector):
            return KeyKind.V1, connector
    return KeyKind.UNKNOWN, None


@dataclass
class Scan:
    """What the prefix holds, by kind; ``unknown`` names the first few unknown keys."""

    v1: dict[str, set[str]] = field(default_factory=dict)
    current: int = 0
    shared: int = 0
    unknown: list[str] = field(default_factory=list)
    unknown_count: int = 0

    def add(self, prefix: str, key: str) -> None:
        kind, connector = classify(prefix, key)
        if kind is KeyKind.V1:
            assert connector is not None
            self.v1.setdefault(connector, set()).add(key)
        elif kind is KeyKind.CURRENT:
            self.current += 1
        elif kind is KeyKind.SHARED:
            self.shared += 1
        elif kind is KeyKind.UNKNOWN:
            self.unknown_count += 1
            if len(self.unknown) < UNKNOWN_SHOWN:
                self.unknown.append(key)

    @property
    def empty(self) -> bool:
        return not (self.v1 or self.current or self.shared or self.unknown_count)


class UnknownKeys(ConfigurationError):
    """Raised before anything changes when the prefix holds keys of no known layout."""

    def __init__(self, prefix: str, scan: Scan) -> None:
        shown = ", ".join(scan.unknown)
        more = scan.unknown_count - len(scan.unknown)
        super().__init__(
            f"refusing to migrate: {scan.unknown_count} key(s) under prefix {prefix!r} "
            f"belong to no known layout ({shown}{f', and {more} more' if more else ''}); "
            "check FIVETRAN_EVENTS_KEY_PREFIX, or move those keys away; nothing was changed"
        )
        self.scan = scan


class UnreadableV1(ConfigurationError):
    """Raised before a connector's replay when one of its v1 members cannot be read.

    Nothing of that connector has been written then; connectors migrated before it
    stay migrated, and a run after the member is fixed or removed goes on from there.
    """

    def __init__(self, connector: str, member: str, why: str) -> None:
        super().__init__(
            f"refusing to migrate connector {connector!r}: a member of its v1 history cannot "
            f"be read ({why}): {member[:200]!r}; fix or remove it in its keys c:{connector}:*, "
            "then run again (its history was not changed)"
        )
        self.parts = (connector, member, why)

    def __reduce__(self) -> tuple[type[UnreadableV1], tuple[str, str, str]]:
        # Raised in a --jobs worker process, it crosses back to the parent by pickle.
        return (type(self), self.parts)


def _glob_escape(text: str) -> str:
    return "".join(f"\\{ch}" if ch in "*?[]\\" else ch for ch in text)


def scan_prefix(client: redis.Redis, prefix: str) -> Scan:
    """Classify every key under ``prefix`` (SCAN: never blocks Redis like KEYS would)."""
    scan = Scan()
    for raw in client.scan_iter(match=f"{_glob_escape(prefix)}*", count=1000):
        scan.add(prefix, as_text(raw))
    return scan
