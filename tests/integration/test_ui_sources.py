"""The UI's connector page tells delivered syncs from imported and reconciled ones.

The view (airflow_plugin/ui/app.py) on FastAPI's test client with a reader of the suite's
Redis; only Airflow's auth dependency is left out (tests/system/airflow_plugin/test_ui.py
runs the view inside a real Airflow).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from fastapi import Depends
from fastapi.testclient import TestClient

from fivetran_events import HistoryReader, HistoryWriter
from fivetran_events.model import SOURCE_IMPORTED, SOURCE_RECONCILED
from testkit.support import at, ev

CID = "assimilate_seem"


def test_the_page_marks_imported_and_reconciled_syncs(
    writer: HistoryWriter, reader: HistoryReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_plugin.ui import app as ui

    monkeypatch.setattr(ui, "_auth", lambda: Depends(lambda: None))
    writer.record(ev(sync_id="delivered", created=at(3, 2)))
    writer.record(replace(ev(sync_id="imported", created=at(3, 5)), source=SOURCE_IMPORTED))
    writer.record(replace(ev(sync_id="reconciled", created=at(3, 8)), source=SOURCE_RECONCILED))
    client = TestClient(ui.create_app(lambda: reader))
    page: Any = client.get(
        f"/connectors/{CID}", params={"start": "2026-01-01", "end": "2026-01-05"}
    )
    assert page.status_code == 200, page.text
    html = page.text
    for sync_id, source in (("imported", "imported"), ("reconciled", "reconciled")):
        assert (
            f'<tr data-sync-id="{sync_id}" data-status="SUCCESSFUL" data-source="{source}">' in html
        )
        assert f">{source}</span></td>" in html
    assert '<tr data-sync-id="delivered" data-status="SUCCESSFUL">' in html
    assert "delivered (" not in html
