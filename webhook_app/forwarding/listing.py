"""Deliveries shaped for the syncs listing of the read API."""

from __future__ import annotations

from typing import Any

from .store import DeliveryStore


def attach_forwarding(
    store: DeliveryStore, connector_id: str, rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Add each successful sync's forwarding state per URI to the syncs listing's rows."""
    wanted = [r["sync_id"] for r in rows if r.get("status") == "SUCCESSFUL"]
    found = store.for_syncs(connector_id, wanted) if wanted else {}
    for r in rows:
        if r.get("status") == "SUCCESSFUL":
            r["forwarding"] = [
                {
                    k: v
                    for k, v in d.to_dict().items()
                    if k not in ("connector_id", "sync_id", "delivery_id")
                }
                for d in found.get(r["sync_id"], [])
            ]
    return rows
