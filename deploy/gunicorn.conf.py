"""Production gunicorn settings for the webhook app.

Use: ``fivetran-events serve --config deploy/gunicorn.conf.py``.

Every value can be overridden from the environment (``GUNICORN_*`` below), so the same
file serves systemd, the container image and the Compose file.
"""

from __future__ import annotations

import multiprocessing
import os

# Listen on loopback by default; a reverse proxy terminates TLS in front (deploy/nginx.conf).
bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
# A delivery mostly waits on Redis round trips: gunicorn's 2 x cores + 1 workers.
workers = int(os.environ.get("GUNICORN_WORKERS", 2 * multiprocessing.cpu_count() + 1))
# Threaded workers: a client that sends headers and then a body slowly (or never) holds
# one thread, not a whole worker, so with more threads than such clients a delivery and
# /healthz are still answered. A buffering proxy in front (deploy/nginx.conf) is still
# recommended: it reads bodies whole and cuts clients slower than client_body_timeout.
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "32"))
# Fivetran waits for the answer; a webhook is answered in milliseconds, so anything
# near this is a stuck worker and is better restarted.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
# On SIGTERM, finish the deliveries in flight (each is one short Redis transaction).
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "20"))
keepalive = 5
# Recycle workers now and then so a slow leak cannot grow for months.
max_requests = 20_000
max_requests_jitter = 2_000
# Fivetran's bodies are small; refuse absurd header sizes early.
limit_request_field_size = 8190
limit_request_fields = 100
forwarded_allow_ips = os.environ.get("GUNICORN_FORWARDED_ALLOW_IPS", "127.0.0.1")
# No control socket (gunicornc, gunicorn >= 25.1): by default it sits in the user's
# runtime folder, where any process of that user could resize or stop the server.
control_socket_disable = True

accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
# gunicorn's lines and one record per request (method, path, status, bytes, duration_us,
# remote, user_agent, request_id) in the app's format: JSON unless stderr is a terminal
# (FIVETRAN_EVENTS_LOG_FORMAT=json|console decides instead); see webhook_app/logs.py.
logger_class = "webhook_app.logs.GunicornLogger"


def on_starting(server):  # type: ignore[no-untyped-def]
    """Aggregate Prometheus metrics across workers (PROMETHEUS_MULTIPROC_DIR must be empty)."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(path):
            if name.endswith(".db"):
                os.remove(os.path.join(path, name))


def child_exit(server, worker):  # type: ignore[no-untyped-def]
    """Drop a dead worker's live gauges from the multiprocess metrics."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
