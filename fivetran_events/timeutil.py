"""Convert between ISO 8601 text, aware datetimes and epoch milliseconds.

Naive datetimes are read as UTC everywhere, on purpose: Airflow hands out aware UTC
datetimes, and a user who types ``2026-01-10T00:00`` means UTC.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

UTC = timezone.utc


def to_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _normalized(text: str) -> str:
    raw = text.strip()
    return raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw


def is_time_text(text: str) -> bool:
    """Whether ``text`` is written as an ISO 8601 time, in range or not."""
    try:
        datetime.fromisoformat(_normalized(text))
    except ValueError:
        return False
    return True


def parse_iso(text: str) -> datetime:
    """Parse ISO 8601 text into an aware UTC datetime; raise ValueError when it is not one."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("expected an ISO 8601 timestamp")
    raw = _normalized(text)
    try:
        return to_utc(datetime.fromisoformat(raw))
    except ValueError:
        raise ValueError(f"not an ISO 8601 timestamp: {text[:64]!r}") from None
    except OverflowError:  # e.g. 9999-12-31T23:59-14:00 is past year 9999 in UTC
        raise ValueError(f"timestamp out of range: {text[:64]!r}") from None


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_ms(value: datetime) -> int:
    aware = to_utc(value)
    # Integer arithmetic: no float rounding of microseconds. datetime's own subtraction: a
    # subclass's (Airflow hands out pendulum's) builds an interval, many times the cost.
    delta = datetime.__sub__(aware, EPOCH)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(ms: int | float) -> datetime:
    """Return the aware UTC datetime of epoch ms: not ``fromtimestamp(ms / 1000)``, whose
    float loses the last millisecond far from 1970 and which refuses early years."""
    return EPOCH + timedelta(milliseconds=int(ms))


def iso(value: datetime | int | float | None) -> str | None:
    """Format a datetime or epoch ms as ISO 8601 UTC, milliseconds and ``Z``."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = from_ms(value)
    return to_utc(value).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_ms() -> int:
    """Return the wall clock in epoch ms, exact also under freezegun (whose ``time_ns``
    goes through a float)."""
    return to_ms(datetime.now(UTC))
