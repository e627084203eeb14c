"""A stand-in for Fivetran's REST API on 127.0.0.1, enough for the provider's hook.

It serves ``GET/PATCH /v1/connectors/{id}`` and ``POST /v1/connectors/{id}/force``
with the fields ``airflow-provider-fivetran-async`` reads (``succeeded_at``,
``failed_at``, ``status.sync_state``, …) and counts every call, so tests and the
benchmark can show what the provider's sensor and operator cost. A forced sync ends
``sync_seconds`` later; ``on_sync_end`` lets the caller also deliver the webhook.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fivetran_events.timeutil import iso

from .servers import serving_in_thread


class FivetranStandIn:
    """The connectors' state and the calls received."""

    def __init__(
        self, sync_seconds: float = 0.5, on_sync_end: Callable[[str, datetime], None] | None = None
    ) -> None:
        self.connectors: dict[str, dict[str, Any]] = {}
        self.calls: Counter[str] = Counter()
        self.sync_seconds = sync_seconds
        self.on_sync_end = on_sync_end
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def connector(
        self,
        connector_id: str,
        succeeded_at: datetime | None = None,
        failed_at: datetime | None = None,
        sync_state: str = "scheduled",
    ) -> None:
        """Set a connector's state as Fivetran would report it."""
        with self.lock:
            self.connectors[connector_id] = {
                "id": connector_id,
                "group_id": "inappropriate_implode",
                "service": "google_cloud_postgresql",
                "schema": "ftar_pg",
                "paused": False,
                "schedule_type": "manual",
                "succeeded_at": iso(succeeded_at),
                "failed_at": iso(failed_at),
                "status": {
                    "setup_state": "connected",
                    "sync_state": sync_state,
                    "update_state": "on_schedule",
                    "is_historical_sync": False,
                },
            }

    def finish_sync(self, connector_id: str, ended: datetime, ok: bool = True) -> None:
        with self.lock:
            c = self.connectors[connector_id]
            c["succeeded_at" if ok else "failed_at"] = iso(ended)
            c["status"]["sync_state"] = "scheduled"

    @property
    def base(self) -> tuple[str, str]:
        """(api_protocol, api_host) to set on the provider's FivetranHook."""
        assert self.server is not None
        return "http", f"127.0.0.1:{self.server.server_address[1]}"

    def _force(self, connector_id: str) -> None:
        with self.lock:
            self.connectors[connector_id]["status"]["sync_state"] = "syncing"

        def end() -> None:
            from datetime import timezone

            ended = datetime.now(timezone.utc)
            self.finish_sync(connector_id, ended)
            if self.on_sync_end is not None:
                self.on_sync_end(connector_id, ended)

        threading.Timer(self.sync_seconds, end).start()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _route(self, method: str) -> None:
                parts = self.path.split("?")[0].strip("/").split("/")
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                if len(parts) < 3 or parts[:2] != ["v1", "connectors"]:
                    self._answer(404, {"code": "NotFound"})
                    return
                cid = parts[2]
                key = f"{method} /v1/connectors/{{id}}" + ("/" + parts[3] if len(parts) > 3 else "")
                with api.lock:
                    api.calls[key] += 1
                    known = cid in api.connectors
                if not known:
                    self._answer(404, {"code": "NotFound", "message": f"no connector {cid}"})
                elif method == "POST" and parts[3:] == ["force"]:
                    api._force(cid)
                    self._answer(200, {"code": "Success", "message": "Sync has been forced"})
                else:
                    with api.lock:
                        if method == "PATCH":
                            api.connectors[cid].update(body)
                        data = json.loads(json.dumps(api.connectors[cid]))
                    self._answer(200, {"code": "Success", "data": data})

            def do_GET(self) -> None:
                self._route("GET")

            def do_PATCH(self) -> None:
                self._route("PATCH")

            def do_POST(self) -> None:
                self._route("POST")

        return Handler

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


@contextmanager
def serving(api: FivetranStandIn) -> Iterator[FivetranStandIn]:
    """Serve ``api`` on a free 127.0.0.1 port for the duration of the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), api.handler())
    api.server = server
    with serving_in_thread(server):
        yield api
