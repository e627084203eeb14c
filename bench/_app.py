"""The benchmark's WSGI app: the real app plus a trivial POST endpoint as the baseline."""

from __future__ import annotations

from flask import Response, jsonify, request

from webhook_app import create_app

app = create_app()


@app.post("/bench/noop")
def noop() -> Response:
    """Read the body and answer, as a webhook would, without verifying or storing."""
    request.get_data(cache=False)
    return jsonify({"status": "ok"})
