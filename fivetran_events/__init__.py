"""fivetran-events' shared core: event model, Redis history, decision, settings.

Nothing here imports Flask, RQ or Airflow: the webhook server and the Airflow plugin build on it.
"""

from __future__ import annotations

from .decision import (
    Completion,
    Criterion,
    Decision,
    Facts,
    Outcome,
    RunningSync,
    decide,
    parse_criterion,
)
from .exceptions import ConfigurationError, FivetranEventsError, InvalidPayload
from .history import (
    AsyncHistoryReader,
    HistoryReader,
    HistoryWriter,
    WriteResult,
    WriteStatus,
    decode_completion,
    encode_completion,
)
from .model import Event, EventKind, parse_event
from .settings import Settings, load_settings
from .text import as_text

__version__ = "0.1.0"

__all__ = [
    "AsyncHistoryReader",
    "Completion",
    "ConfigurationError",
    "Criterion",
    "Decision",
    "Event",
    "EventKind",
    "Facts",
    "FivetranEventsError",
    "HistoryReader",
    "HistoryWriter",
    "InvalidPayload",
    "Outcome",
    "RunningSync",
    "Settings",
    "WriteResult",
    "WriteStatus",
    "__version__",
    "as_text",
    "decide",
    "decode_completion",
    "encode_completion",
    "load_settings",
    "parse_criterion",
    "parse_event",
]
