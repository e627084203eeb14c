"""A stand-in for Airflow 2.9-2.11's ``/api/v1`` dataset endpoints, on 127.0.0.1.

It answers with the request and response shapes of Airflow 2's stable REST API
(``POST /api/v1/datasets/events`` with ``{"dataset_uri", "extra"}`` and basic auth;
``GET /api/v1/datasets/{uri}``; ``GET /api/v1/datasets?uri_pattern=`` with each
dataset's ``consuming_dags``; ``GET /api/v1/datasets/events?dataset_id=&order_by=``;
``GET /api/v1/health``), keeping what it was sent so tests can check it. Faults
(5xx, 429 with Retry-After, a 200 HTML page) can be queued. Only for the Airflow 2
path: Airflow 3 is tested against the real thing (testkit/airflow_harness.py).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

from flask import Flask, Response, jsonify, request
from werkzeug.serving import make_server

from .servers import serving_in_thread

BASIC_AUTH = "airflow.api.auth.backend.basic_auth"
SESSION_AUTH = "airflow.api.auth.backend.session"


@dataclass
class Airflow2StandIn:
    username: str = "admin"
    password: str = "admin-pass"
    datasets: dict[str, int] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    posts: list[dict[str, Any]] = field(default_factory=list)
    faults: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    #: Seconds to sit on a created event before answering (a POST that times out but lands).
    answer_delay: float = 0.0
    #: Seconds to hold the first POST before creating its event (Airflow committing a
    #: request after its client gave up); later POSTs are committed at once.
    first_commit_delay: float = 0.0
    #: Seconds to hold the POST of a named sync's event before committing it (one slow
    #: answer among prompt ones).
    hold_syncs: dict[str, float] = field(default_factory=dict)
    #: POSTs received whose event is not committed yet.
    uncommitted: int = 0
    url: str = ""

    #: Per dataset URI: the DAGs scheduled on it (``consuming_dags``).
    consumers: dict[str, list[str]] = field(default_factory=dict)
    #: How many listings (``GET /api/v1/datasets``) were asked.
    listings: int = 0
    #: Airflow's ``[api] auth_backends``; a stock Airflow 2 has only the session one.
    auth_backends: tuple[str, ...] = (BASIC_AUTH,)

    def add_dataset(self, uri: str, dags: tuple[str, ...] = ()) -> int:
        self.datasets[uri] = len(self.datasets) + 1
        self.consumers[uri] = list(dags)
        return self.datasets[uri]

    def app(self) -> Flask:
        app = Flask("airflow2-standin")

        def authorised() -> bool:
            raw = request.headers.get("Authorization", "")
            if not raw.startswith("Basic "):
                return False
            user, _, pw = base64.b64decode(raw[6:]).decode().partition(":")
            return (user, pw) == (self.username, self.password)

        def problem(status: int, title: str) -> Response:
            resp = jsonify(
                {"status": status, "title": title, "type": "about:blank", "detail": title}
            )
            resp.status_code = status
            return resp

        @app.before_request
        def guard() -> Response | None:
            if request.path == "/api/v1/health":
                return None
            if BASIC_AUTH not in self.auth_backends or not authorised():
                return problem(401, "Unauthorized")  # the same 401 either way
            if self.faults:
                status, headers = self.faults.pop(0)
                if status == 200:  # a proxy's page where Airflow's JSON should be
                    return Response("<html>maintenance</html>", 200, content_type="text/html")
                resp = problem(status, "injected fault")
                resp.headers.update(headers)
                return resp
            return None

        @app.get("/api/v1/health")
        def health() -> Response:
            return jsonify(
                {"metadatabase": {"status": "healthy"}, "scheduler": {"status": "healthy"}}
            )

        def described(uri: str) -> dict[str, Any]:
            return {
                "id": self.datasets[uri],
                "uri": uri,
                "extra": {},
                "created_at": "2026-01-01T00:00:00+00:00",
                "updated_at": "2026-01-01T00:00:00+00:00",
                "consuming_dags": [
                    {"dag_id": d, "created_at": "2026-01-01T00:00:00+00:00"}
                    for d in self.consumers.get(uri, [])
                ],
                "producing_tasks": [],
            }

        @app.get("/api/v1/datasets")
        def listing() -> Response:
            self.listings += 1
            pattern = request.args.get("uri_pattern", "")
            found = [u for u in self.datasets if pattern in u]  # ids grow in insertion order
            off = int(request.args.get("offset", 0))
            lim = min(int(request.args.get("limit", 100)), 100)
            return jsonify(
                {
                    "datasets": [described(u) for u in found[off : off + lim]],
                    "total_entries": len(found),
                }
            )

        @app.get("/api/v1/datasets/<path:uri>")
        def dataset(uri: str) -> Response:
            uri = unquote(uri)
            if uri == "events":
                return events()
            if uri not in self.datasets:
                return problem(404, "Dataset not found")
            return jsonify(described(uri))

        def events() -> Response:
            found = self.events
            if request.args.get("dataset_id"):
                found = [e for e in found if e["dataset_id"] == int(request.args["dataset_id"])]
            if request.args.get("order_by") == "-timestamp":
                found = sorted(found, key=lambda e: e["timestamp"], reverse=True)
            off = int(request.args.get("offset", 0))
            lim = int(request.args.get("limit", 100))
            return jsonify({"dataset_events": found[off : off + lim], "total_entries": len(found)})

        @app.post("/api/v1/datasets/events")
        def create() -> Response:
            body = request.get_json()
            self.posts.append(body)
            if set(body) - {"dataset_uri", "extra"} or "dataset_uri" not in body:
                return problem(400, "bad request body")
            uri = body["dataset_uri"]
            if uri not in self.datasets:
                return problem(404, f"Dataset with uri: `{uri}` was not found")
            hold = self.hold_syncs.get(str((body.get("extra") or {}).get("sync_id")), 0.0)
            if self.first_commit_delay and len(self.posts) == 1:
                hold = max(hold, self.first_commit_delay)
            if hold:
                self.uncommitted += 1
                time.sleep(hold)
                self.uncommitted -= 1
            event = {
                "id": len(self.events) + 1,
                "dataset_id": self.datasets[uri],
                "dataset_uri": uri,
                "extra": {**body.get("extra", {}), "from_rest_api": True},
                "source_dag_id": None,
                "source_task_id": None,
                "source_run_id": None,
                "source_map_index": -1,
                "created_dagruns": [],
                "timestamp": datetime.now(timezone.utc).isoformat(),
            }
            self.events.append(event)
            if self.answer_delay:
                time.sleep(self.answer_delay)
            return jsonify(event)

        return app


@contextmanager
def running_airflow2_standin() -> Iterator[Airflow2StandIn]:
    """Serve a fresh stand-in on a free 127.0.0.1 port for the duration of the block."""
    fake = Airflow2StandIn()
    server = make_server("127.0.0.1", 0, fake.app(), threaded=True)
    fake.url = f"http://127.0.0.1:{server.server_port}"
    with serving_in_thread(server):
        yield fake
