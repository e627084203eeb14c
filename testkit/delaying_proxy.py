"""A loopback HTTP proxy in front of Airflow that holds chosen asset-event POSTs.

It forwards every request to Airflow's api-server as is; the next ``holds`` POSTs to the
asset-events endpoint are held ``delay`` seconds before Airflow sees them, so Airflow
commits such a POST ``delay`` seconds after the client sent it, whether or not the client
still waits (a late commit, or one slow answer that holds a worker up to its timeout).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .servers import serving_in_thread

#: Airflow 3's endpoint that creates an asset event.
EVENTS_PATH = "/api/v2/assets/events"


@dataclass
class Holds:
    """What the proxy holds (set ``holds`` any time to arm it) and what it held."""

    delay: float
    holds: int = 1
    #: (monotonic time the hold began, the held event's ``extra.sync_id``) per hold.
    held: list[tuple[float, str | None]] = field(default_factory=list)
    #: Event POSTs received and not yet answered by Airflow (held ones included).
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def track(self, delta: int) -> None:
        with self.lock:
            self.in_flight += delta

    def take(self, body: bytes) -> bool:
        """Count one event POST; return whether to hold it."""
        with self.lock:
            if self.holds <= 0:
                return False
            self.holds -= 1
            try:
                sync_id = (json.loads(body).get("extra") or {}).get("sync_id")
            except ValueError:
                sync_id = None
            self.held.append((time.monotonic(), sync_id))
            return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int] = ("127.0.0.1", 0)
    state: Holds

    def log_message(self, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        event = self.command == "POST" and self.path == EVENTS_PATH
        if event:
            self.state.track(+1)
        try:
            if event and self.state.take(body):
                time.sleep(self.state.delay)
            conn = http.client.HTTPConnection(*self.upstream, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
        finally:
            if event:
                self.state.track(-1)
        try:
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up on this request
            self.close_connection = True

    do_GET = do_POST = _forward


@contextmanager
def delaying_proxy(upstream_port: int, delay: float, holds: int = 1) -> Iterator[tuple[str, Holds]]:
    """Serve the proxy on a free 127.0.0.1 port; yield its URL and its ``Holds``."""
    state = Holds(delay, holds)
    handler = type(
        "DelayingProxy", (_Handler,), {"upstream": ("127.0.0.1", upstream_port), "state": state}
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    with serving_in_thread(server):
        yield f"http://127.0.0.1:{server.server_address[1]}", state
