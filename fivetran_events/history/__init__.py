"""The durable per-connector sync history in Redis (key names: ``fivetran_events.keys``)."""

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
