"""A local OpenLineage receiver that validates every event against OpenLineage's schema.

A real HTTP server on 127.0.0.1 (``POST /api/v1/lineage``, Marquez's path, which the
client posts to by default): each body is checked against the spec's ``RunEvent``
(testkit/openlineage_spec/, vendored from OpenLineage's repository with its license)
and each facet against the schema its ``_schemaURL`` names (the spec's facets, ours in
webhook_app/schemas/ by its ``$id``, or one a server on this machine answers at that URL:
the webhook server's /schemas/), with date-time, uuid and uri formats checked; a run may end once
(one COMPLETE, FAIL or ABORT). A valid event is kept and answered 201; an invalid one
is kept in ``invalid`` with its errors and answered 400, so a test sees both.
``status`` makes it answer something else (503, 429, 400);
``down()`` and ``up()`` stop and restart it on the same port (connection refused between).
"""

from __future__ import annotations

import json
import threading
import uuid
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

from .processes import free_port

SPEC_DIR = Path(__file__).parent / "openlineage_spec"
OUR_SCHEMAS = Path(__file__).parent.parent / "webhook_app" / "schemas"
#: The spec's event definition our events claim (``RunEvent.schemaURL``'s document).
RUN_EVENT = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
#: The event types that end a run (the spec's run cycle: one per run).
TERMINAL = frozenset({"COMPLETE", "FAIL", "ABORT"})


@cache
def registry() -> Registry:
    """The vendored spec and our schemas by their ``$id``; others opened by ``_retrieve``."""
    files = [SPEC_DIR / "OpenLineage.json", *SPEC_DIR.glob("facets/*.json")]
    files += OUR_SCHEMAS.glob("*.json")
    resources = []
    for f in files:
        doc = json.loads(f.read_text())
        resources.append((doc["$id"], Resource.from_contents(doc)))
    return Registry(retrieve=_retrieve).with_resources(resources)  # type: ignore[call-arg]


def _retrieve(url: str) -> Resource:
    """Open a schema the registry lacks at its URL, when a loopback server serves it (the
    webhook server's /schemas/); raising makes it an unknown ``_schemaURL``."""
    if urlsplit(url).hostname not in ("127.0.0.1", "localhost"):
        raise LookupError(f"{url}: not served on this machine")
    resp = requests.get(url, timeout=5)
    resp.raise_for_status()
    return Resource.from_contents(resp.json())


def _validator(ref: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": ref}, registry=registry(), format_checker=FormatChecker())


def known_schema(url: str) -> bool:
    """Whether ``url`` (a facet's ``_schemaURL``) names a schema this receiver has."""
    base = url.split("#", 1)[0]
    try:
        registry().get_or_retrieve(base)
    except Exception:
        return False
    return True


def schema_errors(event: Any) -> list[str]:
    """Return every way ``event`` breaks OpenLineage's schema (empty: valid)."""
    errors = [
        f"{'/'.join(map(str, e.absolute_path)) or '(event)'}: {e.message}"
        for e in _validator(RUN_EVENT).iter_errors(event)
    ]
    if not isinstance(event, dict):
        return errors or ["not an object"]
    run_id = event.get("run", {}).get("runId")
    try:
        uuid.UUID(str(run_id))
    except ValueError:
        errors.append(f"run/runId: {run_id!r} is not a UUID")
    for where, facets in _facets(event):
        for name, facet in facets.items():
            url = facet.get("_schemaURL", "") if isinstance(facet, dict) else ""
            if not known_schema(url):
                errors.append(f"{where}/{name}: unknown _schemaURL {url!r}")
                continue
            errors += [
                f"{where}/{name}/{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in _validator(url).iter_errors(facet)
            ]
    return errors


def _facets(event: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = [
        ("run/facets", event.get("run", {}).get("facets") or {}),
        ("job/facets", event.get("job", {}).get("facets") or {}),
    ]
    for side in ("inputs", "outputs"):
        for i, ds in enumerate(event.get(side) or []):
            out.append((f"{side}/{i}/facets", ds.get("facets") or {}))
    return out


class LineageReceiver:
    """The receiver: ``events`` (valid, in arrival order), ``invalid`` (body, errors)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.events: list[dict[str, Any]] = []
        self.invalid: list[tuple[Any, list[str]]] = []
        #: Answer this instead of 201 (validation still runs; nothing is kept).
        self.status: int | None = None
        #: Requests received in all, kept or not.
        self.requests = 0
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        """Listen (again) on the same port."""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                code = receiver.receive(self.path, body)
                self.send_response(code)
                if code == 429:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def down(self) -> None:
        """Stop listening: a client's connection is refused until ``up()``."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join(5)
            self._server = None

    def receive(self, path: str, body: bytes) -> int:
        with self.lock:
            self.requests += 1
            if path != "/api/v1/lineage":
                return 404
            try:
                event = json.loads(body)
            except ValueError:
                self.invalid.append((body, ["not JSON"]))
                return 400
            errors = schema_errors(event) or self.second_end(event)
            if errors:
                self.invalid.append((event, errors))
                return 400
            if self.status is not None:
                return self.status
            self.events.append(event)
            return 201

    def second_end(self, event: dict[str, Any]) -> list[str]:
        """The spec allows one terminal event (COMPLETE, FAIL, ABORT) per run; the same
        event twice (a resent POST) is one transition, any other is an error."""
        run, kind = event["run"]["runId"], event["eventType"]
        ended = [
            e
            for e in self.events
            if e["run"]["runId"] == run and e["eventType"] in TERMINAL and e != event
        ]
        if kind in TERMINAL and ended:
            return [f"run/runId: {run} already ended with {ended[0]['eventType']}"]
        return []

    def types(self) -> list[str]:
        with self.lock:
            return [e["eventType"] for e in self.events]

    def __enter__(self) -> LineageReceiver:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()
