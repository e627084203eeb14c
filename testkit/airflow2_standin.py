"""A stand-in for Airflow's REST API of datasets and assets, on 127.0.0.1: 2.9-2.11's
``/api/v1`` by default, 3.x's ``/api/v2`` with ``airflow_version="3..."``.

It answers with the request and response shapes of Airflow 2's stable REST API
(``POST /api/v1/datasets/events`` with ``{"dataset_uri", "extra"}`` and basic auth;
``GET /api/v1/datasets/{uri}``; ``GET /api/v1/datasets?uri_pattern=`` with each
dataset's ``consuming_dags``; ``GET /api/v1/datasets/events?dataset_id=&order_by=``;
``GET /api/v1/health``), keeping what it was sent so tests can check it. Faults
(5xx, 429 with Retry-After, a 200 HTML page) can be queued.

As Airflow 3 (``airflow_version`` 3.x) it answers ``POST /auth/token``,
``GET /api/v2/monitor/health``, ``/api/v2/version``, ``/api/v2/assets`` (with
``scheduled_dags``), ``GET|POST /api/v2/assets/events`` in Airflow 3.3's shapes: a strict
POST body whose optional ``partition_key`` (3.2+; before, an extra field and so a 422)
comes back in the event. It is for the integration tier's partition tests; everything
else of Airflow 3 is tested against the real thing (testkit/airflow_harness.py).
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

from fivetran_events.timeutil import parse_iso

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
    #: The version ``/api/v*/version`` reports; 3.x serves ``/api/v2`` instead of ``/api/v1``.
    airflow_version: str = "2.10.5"
    token: str = "standin-jwt"

    @property
    def v3(self) -> bool:
        return self.airflow_version.startswith("3")

    @property
    def takes_partitions(self) -> bool:
        return self.v3 and tuple(int(p) for p in self.airflow_version.split(".")[:2]) >= (3, 2)

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
            v3_path = request.path.startswith("/api/v2") or request.path == "/auth/token"
            if v3_path != self.v3:
                return problem(404, "Not Found")
            if request.path in ("/api/v1/health", "/api/v2/monitor/health", "/auth/token"):
                return None
            if self.v3:
                if request.headers.get("Authorization") != f"Bearer {self.token}":
                    return problem(401, "Not authenticated")
            elif BASIC_AUTH not in self.auth_backends or not authorised():
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

        @app.get("/api/v1/version")
        @app.get("/api/v2/version")
        def version() -> Response:
            return jsonify({"version": self.airflow_version, "git_version": None})

        @app.post("/api/v1/datasets/events")
        def create() -> Response:
            body = request.get_json()
            self.posts.append(body)
            if set(body) - {"dataset_uri", "extra"} or "dataset_uri" not in body:
                return problem(400, "bad request body")
            uri = body["dataset_uri"]
            if uri not in self.datasets:
                return problem(404, f"Dataset with uri: `{uri}` was not found")
            self._commit(body)
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

        v3_routes(self, app)
        return app

    def _commit(self, body: dict[str, Any]) -> None:
        """Hold the POST as ``hold_syncs`` (by sync id, or "sync_id partition_key") and
        ``first_commit_delay`` say, before its event is created."""
        sync = str((body.get("extra") or {}).get("sync_id"))
        hold = self.hold_syncs.get(f"{sync} {body.get('partition_key')}", 0.0)
        hold = max(hold, self.hold_syncs.get(sync, 0.0))
        if self.first_commit_delay and len(self.posts) == 1:
            hold = max(hold, self.first_commit_delay)
        if hold:
            self.uncommitted += 1
            time.sleep(hold)
            self.uncommitted -= 1


def v3_routes(fake: Airflow2StandIn, app: Flask) -> None:
    """Airflow 3.3's token, health, version, asset and asset-event endpoints."""
    stamp = "2026-01-01T00:00:00Z"

    def detail(status: int, text: str | list[dict[str, Any]]) -> Response:
        resp = jsonify({"detail": text})
        resp.status_code = status
        return resp

    @app.post("/auth/token")
    def token() -> Response:
        body = request.get_json(silent=True) or {}
        if (body.get("username"), body.get("password")) != (fake.username, fake.password):
            return detail(401, "Invalid credentials")
        resp = jsonify({"access_token": fake.token})
        resp.status_code = 201
        return resp

    @app.get("/api/v2/monitor/health")
    def health3() -> Response:
        return jsonify({"metadatabase": {"status": "healthy"}, "scheduler": {"status": "healthy"}})

    def page(items: list[Any], key: str) -> Response:
        off = int(request.args.get("offset", 0))
        lim = min(int(request.args.get("limit", 50)), 100)
        return jsonify({key: items[off : off + lim], "total_entries": len(items)})

    @app.get("/api/v2/assets")
    def assets3() -> Response:
        fake.listings += 1
        pattern = request.args.get("uri_pattern", "")
        return page(
            [
                {
                    "id": i,
                    "name": u,
                    "uri": u,
                    "group": "asset",
                    "extra": {},
                    "created_at": stamp,
                    "updated_at": stamp,
                    "scheduled_dags": [
                        {"dag_id": d, "created_at": stamp, "updated_at": stamp}
                        for d in fake.consumers.get(u, [])
                    ],
                    "producing_tasks": [],
                    "consuming_tasks": [],
                    "aliases": [],
                    "watchers": [],
                    "last_asset_event": None,
                }
                for u, i in fake.datasets.items()
                if pattern in u
            ],
            "assets",
        )

    @app.get("/api/v2/assets/events")
    def events3() -> Response:
        found = fake.events
        if request.args.get("asset_id"):
            found = [e for e in found if e["asset_id"] == int(request.args["asset_id"])]
        if request.args.get("timestamp_gte"):
            since = parse_iso(request.args["timestamp_gte"])
            found = [e for e in found if parse_iso(e["timestamp"]) >= since]
        if request.args.get("order_by") == "-timestamp":
            found = sorted(found, key=lambda e: e["timestamp"], reverse=True)
        return page(found, "asset_events")

    @app.post("/api/v2/assets/events")
    def create3() -> Response:
        body = request.get_json()
        fake.posts.append(body)
        allowed = {"asset_id", "extra", "access_control"}
        if fake.takes_partitions:
            allowed.add("partition_key")
        extra_fields = sorted(set(body) - allowed)
        if extra_fields or "asset_id" not in body:
            # pydantic's answer to a StrictBaseModel (CreateAssetEventsBody)
            return detail(
                422,
                [
                    {
                        "type": "extra_forbidden",
                        "loc": ["body", f],
                        "msg": "Extra inputs are not permitted",
                        "input": body[f],
                    }
                    for f in extra_fields
                ]
                or [{"type": "missing", "loc": ["body", "asset_id"], "msg": "Field required"}],
            )
        key = body.get("partition_key")
        if key is not None and (not isinstance(key, str) or not key.strip() or len(key) > 250):
            return detail(
                422, [{"type": "string_pattern_mismatch", "loc": ["body", "partition_key"]}]
            )
        uri = next((u for u, i in fake.datasets.items() if i == body["asset_id"]), None)
        if uri is None:
            return detail(404, f"Asset with ID: `{body['asset_id']}` was not found")
        fake._commit(body)
        event = {
            "id": len(fake.events) + 1,
            "asset_id": body["asset_id"],
            "uri": uri,
            "name": uri,
            "group": "asset",
            "extra": {**(body.get("extra") or {}), "from_rest_api": True},
            "source_task_id": None,
            "source_dag_id": None,
            "source_run_id": None,
            "source_map_index": -1,
            "created_dagruns": [],
            "timestamp": datetime.now(timezone.utc).isoformat(),
            "partition_key": key,
        }
        fake.events.append(event)
        if fake.answer_delay:
            time.sleep(fake.answer_delay)
        return jsonify(event)


@contextmanager
def running_airflow2_standin(airflow_version: str = "2.10.5") -> Iterator[Airflow2StandIn]:
    """Serve a fresh stand-in on a free 127.0.0.1 port for the duration of the block."""
    fake = Airflow2StandIn(airflow_version=airflow_version)
    server = make_server("127.0.0.1", 0, fake.app(), threaded=True)
    fake.url = f"http://127.0.0.1:{server.server_port}"
    with serving_in_thread(server):
        yield fake
