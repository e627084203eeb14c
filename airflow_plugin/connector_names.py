"""A connector named by its Fivetran name: resolved from the recorded connectors.

Pure, so it is tested without Redis; ``FivetranEventsRedisHook.connector_id_for`` reads
the connectors hash and calls it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fivetran_events import as_text

from .exceptions import ConnectorNameError


def resolve_connector_name(
    connectors: Mapping[Any, Any], name: str, destination_name: str | None = None
) -> str:
    """Return the id of the one recorded connector called ``name`` (in that destination).

    ``connectors`` is the history's connectors hash (id -> JSON with ``name`` and
    ``group``). Fivetran's webhooks carry the destination's group id, not its display
    name, so ``destination_name`` is matched against that group id. No match, or several
    without a destination to tell them apart, raises ``ConnectorNameError`` naming the
    candidates.
    """
    known = []
    for cid, raw in connectors.items():
        meta = json.loads(raw)
        known.append((as_text(cid), meta.get("name"), meta.get("group")))
    named = sorted(k for k in known if k[1] == name)
    found = [k for k in named if destination_name is None or k[2] == destination_name]
    if len(found) == 1:
        return found[0][0]
    where = f" in destination (group) {destination_name!r}" if destination_name else ""
    if found:
        raise ConnectorNameError(
            f"connector name {name!r} is ambiguous: {_listing(found)}; "
            f"give destination_name (the group) or connector_id"
        )
    if named:
        raise ConnectorNameError(
            f"no connector named {name!r}{where}; connectors of that name: {_listing(named)}"
        )
    names = sorted({k[1] for k in known if k[1]})
    raise ConnectorNameError(
        f"no connector named {name!r}{where} in the recorded history "
        f"(known names: {', '.join(names) or 'none yet'}); a connector is known once one "
        f"of its webhooks has been recorded"
    )


def _listing(candidates: list[tuple[str, Any, Any]]) -> str:
    return ", ".join(f"{cid} (group {group})" for cid, _, group in candidates)
