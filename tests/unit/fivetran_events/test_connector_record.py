"""A connector's stored record decoded: empty strings read as unknown (records written
and read through Redis: tests/integration/fivetran_events/test_reader_records.py)."""

from __future__ import annotations

from fivetran_events.history import ConnectorRecord


class TestConnectorRecord:
    def test_an_empty_entry_has_no_fields(self) -> None:
        """Empty strings in the stored JSON read as unknown, as everywhere else."""
        rec = ConnectorRecord.decode(b"c", '{"name": "", "group": "g"}')
        assert (rec.connector_id, rec.name, rec.group, rec.lifecycle.state) == (
            "c",
            None,
            "g",
            None,
        )
