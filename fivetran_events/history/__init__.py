"""The durable per-connector sync history in Redis.

- ``codec``: how a completion is stored as a sorted-set member;
- ``writer``: ``HistoryWriter``, one event recorded idempotently and atomically by one
  script (``_lua.record_script``);
- ``reader``: ``HistoryReader`` and its async twin ``AsyncHistoryReader``, whose
  ``decide`` is the one decision entry point, and the listings for the read API and CLI.

Key names come from ``fivetran_events.keys``.
"""

from __future__ import annotations

from .codec import decode_completion, encode_completion
from .reader import AsyncHistoryReader, ConnectorRecord, HistoryReader
from .writer import HistoryWriter, OnSuccess, WriteResult, WriteStatus

__all__ = [
    "AsyncHistoryReader",
    "ConnectorRecord",
    "HistoryReader",
    "HistoryWriter",
    "OnSuccess",
    "WriteResult",
    "WriteStatus",
    "decode_completion",
    "encode_completion",
]
