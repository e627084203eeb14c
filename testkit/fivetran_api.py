"""A stand-in for Fivetran's REST API on 127.0.0.1: today's endpoints, and the legacy ones.

Today's, as Fivetran documents them (fivetran.com/docs/rest-api), for our own client
(``fivetran_events.fivetran_api``):

- ``GET /v1/connections`` (``group_id``, ``schema`` filters), ``GET /v1/connections/{id}``,
  ``GET /v1/groups``, ``GET /v1/webhooks``: paged by cursor (``?cursor=&limit=``, limit
  1..1000, 100 by default; ``data.items``, ``data.next_cursor`` while more are left);
- ``POST /v1/webhooks/account``, ``POST /v1/webhooks/group/{group_id}``: the webhook is
  created only if the signed ``test_event`` POSTed to its URL (when ``active``) gets a
  2xx, as Fivetran does; otherwise 400. Its secret is answered masked (``******``);
- ``PATCH /v1/webhooks/{id}`` changes ``url``, ``events``, ``active``, ``secret``; with
  ``run_tests`` (true unless false) an active webhook is tested as on creation, with the
  new secret and URL, and nothing changes unless that gets a 2xx;
- ``GET|DELETE /v1/webhooks/{id}``; ``POST /v1/webhooks/{id}/test`` with
  ``{"event": ...}`` POSTs a signed sample of that event (connection ``_connection_1``)
  and answers ``data.succeed``/``status``/``message``.

Tables and destinations, as Fivetran documents them: ``GET /v1/connections/{id}/schemas``
answers the schema configuration (``data.schemas`` keyed by the source's schema names,
each with ``name_in_destination``, ``enabled`` and ``tables`` keyed the same way, each
table with ``name_in_destination``, ``enabled``, ``sync_mode``); ``GET
/v1/destinations/{id}`` (the id is the group's) answers ``service``, ``region``,
``setup_status`` and ``config`` (``host``, ``port``, ``database``, ``project_id``, ...,
secrets as ``******``). ``tables`` and ``destination`` set them.

Unknown ids get 404 with Fivetran's error body (``{"code", "message"}``), a wrong Basic
auth 401. ``fail_next`` makes the next calls answer 429 with ``Retry-After`` (or another
status), ``delay_seconds`` holds every answer back (timeouts). One deviation, for tests:
a webhook URL may be plain ``http://`` (the test servers have no TLS) unless
``allow_http`` is off; Fivetran refuses it with 400.

Syncs, as Fivetran documents them: ``POST /v1/connections/{id}/sync`` (``{"force":
bool}``) and ``.../resync`` (optional ``{"scope": {schema: [table, ...]}}``), and
``PATCH /v1/connections/{id}``. A sync starts at once and ends ``sync_seconds`` later
with ``next_status`` (SUCCESSFUL by default), updating ``succeeded_at``/``failed_at``;
RESCHEDULED moves neither and leaves ``status.sync_state`` ``rescheduled`` with
``status.rescheduled_for`` ``reschedule_seconds`` later (``data.rescheduledAt`` in the
webhook), until a request starts the sync again.
A request while the connection syncs starts nothing without ``force`` ("the connection
will sync only if it isn't currently syncing"; still answered 200); with ``force`` the
running sync is stopped (it ends CANCELED) and a new one starts. A resync instead
completes the running sync (it ends SUCCESSFUL) and starts ``resync_gap_seconds``
later, or, with
``resync_conflict`` set, answers 409 ("If there is a data sync already in progress, we
will try to complete it. If it fails, ... 409 Conflict", fivetran.com/docs/rest-api/
api-reference/connections/resync-connection); an empty ``scope`` or table list is 400.
A PATCH runs the setup tests (counted in ``setup_tests``) unless ``run_setup_tests`` is
false, and a PATCH of test-control fields alone is 400, as Fivetran's "Update a
Connection" says. With ``webhook_url``
set, each start and end is POSTed there signed with ``webhook_secret``, in order, from
one thread (``sync_start`` at the start, ``sync_end`` at the end), unless ``silent``:
a broken webhook.

Sync history, as Fivetran's REST API reference documents it ("Retrieve Connection Sync
History", fivetran.com/docs/rest-api/api-reference/connections/retrieve-connection-sync-history):
``GET /v1/connections/{id}/sync-history?start_time=&end_time=&cursor=&limit=`` (ISO 8601
times; a missing one is an hour from the other, both missing the last hour; ``end_time``
after ``start_time`` and at most 7 days from it, else 400; ``duration`` is deprecated and
ignored) pages like the collections above. Its items are the syncs started in the range,
oldest first: ``sync_id``, ``start_time``, ``end_time`` (null while it runs), ``status``
(the ``sync_end`` status; null while it runs) and, for a failure, ``reason``. The
reference describes the items' start ("the UTC timestamp of when the sync started, in
ISO 8601 format"); the other key names follow its query parameters and the webhook's
``sync_end``: check them against the reference when it changes. ``FivetranClient``
reads them leniently (an item without an end, id or status is skipped). They are the syncs the
stand-in ran and those
``past_sync`` adds; ``sync_history_status`` makes the endpoint answer 404 or 403 (an
account or API version without it).

The legacy endpoints, for ``airflow-provider-fivetran-async``'s hook (the sensor
benchmark and the provider's system test): ``GET/PATCH /v1/connectors/{id}``,
``POST /v1/connectors/{id}/force`` and ``.../resync``, and ``GET
/v1/groups/{id}/connectors`` with the fields it reads (``succeeded_at``,
``failed_at``, ``status.sync_state``, …). ``/force`` is today's sync with ``force``;
``on_sync_end`` lets the caller also deliver the webhook its own way. Both paths serve the same
connections. Every call is counted in ``calls``, so tests and the benchmark can show
what a client costs.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import requests

from fivetran_events.model import SIGNATURE_HEADER, sign
from fivetran_events.timeutil import iso, parse_iso

from .servers import serving_in_thread

#: The test delivery Fivetran POSTs when a webhook is created (its documentation's).
TEST_EVENT: dict[str, Any] = {
    "event": "test_event",
    "created": "timestamp",
    "connector_type": "_connector_type",
    "connector_id": "_connector_1",
    "group_id": "_destination_1",
}
#: The user Fivetran names as a webhook's creator.
CREATED_BY = "_airworthy"
#: The key and secret the CLI tests' stand-in accepts.
TEST_API_KEY, TEST_API_SECRET = "ft-key", "ft-api-secret-for-tests"
#: Fivetran's destination services (``service``), as terraform-provider-fivetran lists
#: them: https://github.com/fivetran/terraform-provider-fivetran/blob/main/destination-services.txt
DESTINATION_SERVICES = frozenset(
    """aiven_kafka_wh aurora_postgres_warehouse aurora_warehouse aws_msk_wh
    azure_postgres_warehouse azure_sql_data_warehouse azure_sql_database
    azure_sql_managed_db_warehouse big_query big_query_dts clickhouse confluent_cloud_wh
    databricks databricks_via_managed_data_lake managed_big_query managed_data_lake
    maria_rds_warehouse maria_warehouse materialize milvus motherduck mysql_rds_warehouse
    mysql_warehouse oracle_rac_warehouse oracle_rds_warehouse oracle_warehouse
    postgres_databricks_warehouse postgres_gcp_warehouse postgres_rds_warehouse
    postgres_warehouse redshift singlestore snowflake sql_server_rds_warehouse
    sql_server_warehouse surrealdb_destination teradata_destination""".split()  # noqa: SIM905
)


@dataclass(frozen=True)
class Delivery:
    """One POST the stand-in made to a webhook's URL, and what it got."""

    url: str
    body: dict[str, Any]
    #: The status the URL answered; None when it could not be reached.
    status: int | None


class Answer(Exception):
    """Raised by a route to answer with ``status`` and Fivetran's body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        #: The call's name in ``calls``; None: counted under its status.
        self.name: str | None = None


def _error(status: int, code: str, message: str) -> Answer:
    return Answer(status, {"code": code, "message": message})


def _cursor(skip: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"skip": skip}).encode()).decode().rstrip("=")


def _skip(cursor: str) -> int:
    try:
        skip = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))["skip"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise _error(400, "InvalidInput", f"Invalid cursor: {cursor}") from None
    if not isinstance(skip, int) or skip < 0:
        raise _error(400, "InvalidInput", f"Invalid cursor: {cursor}")
    return skip


class FivetranStandIn:
    """The account's connections, groups and webhooks, and the calls received."""

    def __init__(
        self,
        sync_seconds: float = 0.5,
        on_sync_end: Callable[[str, datetime], None] | None = None,
        api_key: str = "key",
        api_secret: str = "secret",
        allow_http: bool = True,
    ) -> None:
        self.connectors: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        self.webhooks: dict[str, dict[str, Any]] = {}
        #: Every POST made to a webhook's URL (creation tests and webhook tests).
        self.deliveries: list[Delivery] = []
        self.calls: Counter[str] = Counter()
        self.sync_seconds = sync_seconds
        self.on_sync_end = on_sync_end
        self.api_key = api_key
        self.api_secret = api_secret
        self.allow_http = allow_http
        #: Seconds every answer is held back (a client's read timeout).
        self.delay_seconds = 0.0
        self._faults: list[tuple[int, str | None]] = []
        self._ids = itertools.count(1)
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        #: Where sync_start/sync_end webhooks go (None: nowhere), signed with the secret.
        self.webhook_url: str | None = None
        self.webhook_secret: str | None = None
        #: True: syncs run, but no webhook is sent (a broken or deleted webhook).
        self.silent = False
        #: The status the next syncs end with.
        self.next_status = "SUCCESSFUL"
        #: Seconds from a RESCHEDULED end to its ``status.rescheduled_for``.
        self.reschedule_seconds = 60.0
        #: True: a resync while a sync runs answers 409 (the running one cannot complete).
        self.resync_conflict = False
        #: Seconds between a sync a resync completed and the resync's start.
        self.resync_gap_seconds = 0.5
        #: PATCHes that ran the connection's setup tests.
        self.setup_tests = 0
        #: Per connector: (sync id, started) of its running sync and the timer ending it.
        self.running: dict[str, tuple[str, datetime, threading.Timer]] = {}
        #: Every sync started: (connector id, sync id, started, how it was asked).
        self.started: list[tuple[str, str, datetime, str]] = []
        #: Every sync that ended by itself: sync id -> (ended, status).
        self.ended: dict[str, tuple[datetime, str]] = {}
        #: Per connection: its schema configuration's ``schemas`` (``tables`` sets it).
        self.schemas: dict[str, dict[str, Any]] = {}
        #: Per group id: its destination (``destination`` sets it).
        self.destinations: dict[str, dict[str, Any]] = {}
        #: Per connection: the syncs ``past_sync`` added to its sync history.
        self.history: dict[str, list[dict[str, Any]]] = {}
        #: An error status the sync-history endpoint answers (404, 403), or None.
        self.sync_history_status: int | None = None
        self._outbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self._sender: threading.Thread | None = None
        #: Resyncs waiting for their gap to start (``quiesce`` cancels them).
        self._later: list[threading.Timer] = []

    # --- State, as a test sets it -------------------------------------------------------

    def connector(
        self,
        connector_id: str,
        succeeded_at: datetime | None = None,
        failed_at: datetime | None = None,
        sync_state: str = "scheduled",
        group_id: str = "inappropriate_implode",
        schema: str = "ftar_pg",
        *,
        schedule_type: str = "manual",
        sync_frequency: int = 360,
        daily_sync_time: str | None = None,
        paused: bool = False,
        setup_state: str = "connected",
    ) -> None:
        """Set a connection's state as Fivetran would report it (``daily_sync_time`` is
        listed with a 1440-minute frequency, as Fivetran lists it)."""
        with self.lock:
            self.connectors[connector_id] = {
                "id": connector_id,
                "group_id": group_id,
                "service": "google_cloud_postgresql",
                "schema": schema,
                "paused": paused,
                "schedule_type": schedule_type,
                "sync_frequency": sync_frequency,
                **(
                    {"daily_sync_time": daily_sync_time or "00:00"}
                    if sync_frequency == 1440
                    else {}
                ),
                "succeeded_at": iso(succeeded_at),
                "failed_at": iso(failed_at),
                "status": {
                    "setup_state": setup_state,
                    "sync_state": sync_state,
                    "update_state": "on_schedule",
                    "is_historical_sync": False,
                },
            }

    def group(self, group_id: str, name: str | None = None) -> None:
        """Add a group (a destination) to the account."""
        with self.lock:
            self.groups[group_id] = {
                "id": group_id,
                "name": name or group_id,
                "created_at": "2026-01-01T00:00:00.000000Z",
            }

    def tables(
        self,
        connector_id: str,
        tables: dict[str, list[str]],
        *,
        disabled: dict[str, list[str]] | None = None,
        renamed: dict[str, str] | None = None,
    ) -> None:
        """Set a connection's schema configuration: ``tables`` enabled, ``disabled`` not,
        per source schema; ``renamed`` maps a source name (schema or ``schema.table``) to
        its name in the destination."""
        renamed = renamed or {}
        out: dict[str, Any] = {}
        for enabled, given in ((True, tables), (False, disabled or {})):
            for schema, names in given.items():
                entry = out.setdefault(
                    schema,
                    {
                        "name_in_destination": renamed.get(schema, schema),
                        "enabled": True,
                        "tables": {},
                    },
                )
                for t in names:
                    entry["tables"][t] = {
                        "name_in_destination": renamed.get(f"{schema}.{t}", t),
                        "enabled": enabled,
                        "sync_mode": "SOFT_DELETE",
                        "enabled_patch_settings": {"allowed": True},
                        "columns": {},
                    }
        with self.lock:
            self.schemas[connector_id] = out

    def destination(
        self, group_id: str, service: str = "postgres_warehouse", **config: Any
    ) -> None:
        """Set the destination of a group: its kind (one Fivetran has) and ``config``
        (host, port, database...)."""
        assert service in DESTINATION_SERVICES, f"Fivetran has no destination {service!r}"
        with self.lock:
            self.destinations[group_id] = {
                "id": group_id,
                "group_id": group_id,
                "service": service,
                "region": "GCP_US_EAST4",
                "time_zone_offset": "0",
                "setup_status": "connected",
                "config": {**config, "password": "******"},
            }

    def past_sync(
        self,
        connector_id: str,
        sync_id: str,
        started: datetime,
        ended: datetime,
        status: str = "SUCCESSFUL",
        reason: str | None = None,
    ) -> None:
        """Add a sync that ran to the connection's sync history (its webhook is the
        test's to send, or not), and make its end ``succeeded_at`` or ``failed_at`` when
        it is the newest of its outcome."""
        item = {
            "sync_id": sync_id,
            "start_time": iso(started),
            "end_time": iso(ended),
            "status": status,
            **({"reason": reason} if reason else {}),
        }
        field = {"SUCCESSFUL": "succeeded_at", "FAILURE": "failed_at"}.get(status)
        with self.lock:
            self.history.setdefault(connector_id, []).append(item)
            c = self.connectors[connector_id]
            if field and (c[field] is None or c[field] < iso(ended)):
                c[field] = iso(ended)

    def fail_next(self, times: int, status: int = 429, retry_after: str | None = "1") -> None:
        """Answer the next ``times`` calls, whatever they are, with ``status`` and Retry-After."""
        with self.lock:
            self._faults.extend([(status, retry_after)] * times)

    def finish_sync(self, connector_id: str, ended: datetime, ok: bool = True) -> None:
        with self.lock:
            c = self.connectors[connector_id]
            c["succeeded_at" if ok else "failed_at"] = iso(ended)
            c["status"]["sync_state"] = "scheduled"

    def send(self, url: str, body: dict[str, Any], secret: str | None) -> Delivery:
        """Deliver ``body`` to a webhook's ``url`` as Fivetran does (signed, once: a test
        playing Fivetran's sync events decides itself what is retried or dropped)."""
        return self._deliver(url, body, secret)

    @property
    def base(self) -> tuple[str, str]:
        """(api_protocol, api_host) to set on the provider's FivetranHook."""
        assert self.server is not None
        return "http", f"127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        """The base URL for our own client (``FIVETRAN_EVENTS_FIVETRAN_API_URL``)."""
        protocol, host = self.base
        return f"{protocol}://{host}"

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    # --- Syncs ------------------------------------------------------------------------

    def start_sync(self, connector_id: str, force: bool, how: str = "sync") -> bool:
        """Start a sync as Fivetran does on a request; return whether one started. A
        resync completes a running sync first (or raises the 409 of ``resync_conflict``)."""
        with self.lock:
            current = self.running.get(connector_id)
            if current is not None and how == "resync":
                if self.resync_conflict:
                    raise _error(
                        409,
                        "Conflict",
                        f"Connection '{connector_id}' is syncing and the sync cannot be completed",
                    )
                current[2].cancel()
                self._ended_locked(connector_id, current[0], current[1], "SUCCESSFUL")
                # Fivetran starts the resync after the completed sync, not at its end.
                later = threading.Timer(
                    self.resync_gap_seconds, self.start_sync, (connector_id, False, how)
                )
                later.daemon = True
                self._later.append(later)
                later.start()
                return True
            if current is not None and not force:
                return False  # "will sync only if it isn't currently syncing"
            if current is not None:
                current[2].cancel()
                del self.running[connector_id]
            if current is not None:
                self._send_locked(connector_id, "sync_end", current[0], {"status": "CANCELED"})
            sync_id = str(uuid.uuid4())
            started = datetime.now(timezone.utc)
            if current is not None and started <= current[1]:
                started = current[1]
            timer = threading.Timer(self.sync_seconds, self._end_sync, (connector_id, sync_id))
            timer.daemon = True
            self.running[connector_id] = (sync_id, started, timer)
            self.started.append((connector_id, sync_id, started, how))
            self.connectors[connector_id]["status"]["sync_state"] = "syncing"
            self.connectors[connector_id]["status"].pop("rescheduled_for", None)
            self._send_locked(connector_id, "sync_start", sync_id, None, started)
            timer.start()
        return True

    def _end_sync(self, connector_id: str, sync_id: str) -> None:
        with self.lock:
            current = self.running.get(connector_id)
            if current is None or current[0] != sync_id:
                return  # stopped by a forced sync meanwhile
            ended = self._ended_locked(connector_id, sync_id, current[1], self.next_status)
        if self.on_sync_end is not None:
            self.on_sync_end(connector_id, ended)

    def _ended_locked(
        self, connector_id: str, sync_id: str, started: datetime, status: str
    ) -> datetime:
        """End the running sync with ``status`` and send its ``sync_end``; the lock is held."""
        del self.running[connector_id]
        ended = max(datetime.now(timezone.utc), started)
        self.ended[sync_id] = (ended, status)
        c = self.connectors[connector_id]
        data: dict[str, Any] = {"status": status}
        if status == "RESCHEDULED":
            again = iso(ended + timedelta(seconds=self.reschedule_seconds))
            c["status"].update(sync_state="rescheduled", rescheduled_for=again)
            data["rescheduledAt"] = again
        else:
            c["succeeded_at" if status == "SUCCESSFUL" else "failed_at"] = iso(ended)
            c["status"]["sync_state"] = "scheduled"
        if status not in ("SUCCESSFUL", "RESCHEDULED"):
            data["reason"] = "the stand-in was told to fail"
        self._send_locked(connector_id, "sync_end", sync_id, data, ended)
        return ended

    def _send_locked(
        self,
        connector_id: str,
        event: str,
        sync_id: str,
        data: dict[str, Any] | None,
        when: datetime | None = None,
    ) -> None:
        """Queue a webhook of ``event`` (in order, one sender thread); the lock is held."""
        if self.webhook_url is None or self.silent:
            return
        c = self.connectors[connector_id]
        body: dict[str, Any] = {
            "event": event,
            "created": iso(when or datetime.now(timezone.utc)),
            "connector_type": c["service"],
            "connector_id": connector_id,
            "connector_name": c["schema"],
            "sync_id": sync_id,
            "destination_group_id": c["group_id"],
        }
        if data is not None:
            body["data"] = data
        self._outbox.put(body)
        if self._sender is None:
            self._sender = threading.Thread(target=self._send_all, daemon=True)
            self._sender.start()

    def _send_all(self) -> None:
        while True:
            body = self._outbox.get()
            url, secret = self.webhook_url, self.webhook_secret
            try:
                if url is not None:
                    self._deliver(url, body, secret)
            finally:
                self._outbox.task_done()

    def quiesce(self) -> None:
        """End what a test left going: running syncs and waiting resyncs stop unsent (no
        timer fires later), and the webhooks already queued have been sent on return, so
        nothing reaches the webhook server after the test."""
        with self.lock:
            for _, _, timer in self.running.values():
                timer.cancel()
            for later in self._later:
                later.cancel()
            self.running.clear()
            self._later.clear()
        self._outbox.join()

    # --- The legacy /v1/connectors ------------------------------------------------------

    def _force(self, connector_id: str) -> None:
        self.start_sync(connector_id, force=True, how="legacy force")

    def _legacy(self, method: str, parts: list[str], body: dict[str, Any]) -> dict[str, Any]:
        cid = parts[2]
        with self.lock:
            known = cid in self.connectors
        if not known:
            raise _error(404, "NotFound", f"no connector {cid}")
        if method == "POST" and parts[3:] == ["force"]:
            self._force(cid)
            return {"code": "Success", "message": "Sync has been forced"}
        if method == "POST" and parts[3:] == ["resync"]:
            self.start_sync(cid, force=False, how="resync")
            return {"code": "Success", "message": "Re-sync has been triggered"}
        with self.lock:
            if method == "PATCH":
                self.connectors[cid].update(body)
            data = json.loads(json.dumps(self.connectors[cid]))
        return {"code": "Success", "data": data}

    # --- Today's endpoints --------------------------------------------------------------

    def _page(self, items: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
        try:
            limit = int(query.get("limit", "100"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 1000:
            raise _error(400, "InvalidInput", "limit must be a number in the range 1..1000")
        skip = _skip(query["cursor"]) if "cursor" in query else 0
        data: dict[str, Any] = {"items": items[skip : skip + limit]}
        if skip + limit < len(items):
            data["next_cursor"] = _cursor(skip + limit)
        return {"code": "Success", "data": json.loads(json.dumps(data))}

    def _known(self, table: dict[str, dict[str, Any]], kind: str, key: str) -> dict[str, Any]:
        if key not in table:
            raise _error(404, f"NotFound_{kind}", f"{kind} with id '{key}' doesn't exist")
        return table[key]

    def _deliver(self, url: str, body: dict[str, Any], secret: str | None) -> Delivery:
        """POST ``body`` to ``url`` signed with ``secret``, as Fivetran sends a webhook."""
        raw = json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"}
        if secret:
            headers[SIGNATURE_HEADER] = sign(raw, secret)
        try:
            status: int | None = requests.post(
                url, data=raw, headers=headers, timeout=10
            ).status_code
        except requests.RequestException:
            status = None
        delivery = Delivery(url, body, status)
        with self.lock:
            self.deliveries.append(delivery)
        return delivery

    def _check_webhook(self, body: dict[str, Any]) -> None:
        """Answer 400 unless ``body`` (a webhook's fields) is one Fivetran would keep."""
        url, events = body.get("url"), body.get("events")
        active, secret = body.get("active", True), body.get("secret")
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
            raise _error(400, "InvalidInput", "Field 'url' must be an HTTPS URL")
        if urlsplit(url).scheme == "http" and not self.allow_http:
            raise _error(400, "InvalidInput", "Webhook URL must be secure (HTTPS)")
        if (
            not isinstance(events, list)
            or not events
            or not all(isinstance(e, str) for e in events)
        ):
            raise _error(400, "InvalidInput", "Field 'events' must be a non-empty list of events")
        if not isinstance(active, bool) or not (secret is None or isinstance(secret, str)):
            raise _error(400, "InvalidInput", "Fields 'active' and 'secret' have wrong types")

    def _test_url(self, url: str, secret: str | None) -> None:
        """POST the signed test_event to ``url``; answer 400 unless it got a 2xx."""
        test = self._deliver(url, TEST_EVENT, secret)
        if test.status is None or not 200 <= test.status < 300:
            got = "no answer" if test.status is None else f"status {test.status}"
            raise _error(400, "InvalidInput", f"Webhook test failed: {url} answered {got}")

    def _create_webhook(self, body: dict[str, Any], group_id: str | None) -> dict[str, Any]:
        self._check_webhook(body)
        url, events = body["url"], body["events"]
        active, secret = body.get("active", True), body.get("secret")
        if group_id is not None:
            with self.lock:
                self._known(self.groups, "Group", group_id)
        if active:
            self._test_url(url, secret)
        webhook: dict[str, Any] = {
            "id": f"webhook_{next(self._ids)}",
            "type": "group" if group_id else "account",
            **({"group_id": group_id} if group_id else {}),
            "url": url,
            "events": events,
            "active": active,
            "secret": secret,
            "created_at": iso(datetime.now(timezone.utc)),
            "created_by": CREATED_BY,
        }
        with self.lock:
            self.webhooks[webhook["id"]] = webhook
        kind = "Group" if group_id else "Account"
        return {
            "code": "Success",
            "message": f"{kind} webhook has been created",
            "data": _shown(webhook),
        }

    def _update_webhook(self, webhook_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Change the fields given; with ``run_tests`` (true unless false) an active
        webhook's URL first gets the signed test_event, with the new secret, and nothing
        changes unless that got a 2xx."""
        run_tests = body.get("run_tests", True)
        fields = {k: v for k, v in body.items() if k in WEBHOOK_FIELDS}
        if not isinstance(run_tests, bool) or not fields or set(body) - {*fields, "run_tests"}:
            named = ", ".join(sorted(WEBHOOK_FIELDS))
            message = f"Give at least one of {named}, and no other field"
            raise _error(400, "InvalidInput", message)
        with self.lock:
            webhook = {**self._known(self.webhooks, "Webhook", webhook_id), **fields}
        self._check_webhook(webhook)
        if run_tests and webhook["active"]:
            self._test_url(webhook["url"], webhook["secret"])
        with self.lock:
            self.webhooks[webhook_id] = webhook
        return {"code": "Success", "message": "Webhook has been updated", "data": _shown(webhook)}

    def _sync_history(self, cid: str, query: dict[str, str]) -> dict[str, Any]:
        name = "GET /v1/connections/{id}/sync-history"
        try:
            start = parse_iso(query["start_time"]) if "start_time" in query else None
            end = parse_iso(query["end_time"]) if "end_time" in query else None
        except ValueError:
            raise _named(_error(400, "InvalidInput", "Times must be ISO 8601"), name) from None
        hour = timedelta(hours=1)
        end = end or (start + hour if start else datetime.now(timezone.utc))
        start = start or end - hour
        if not start < end <= start + timedelta(days=7):
            message = "end_time must be after start_time, and at most 7 days from it"
            raise _named(_error(400, "InvalidInput", message), name)
        with self.lock:
            self._known(self.connectors, "Connection", cid)
            if self.sync_history_status is not None:
                raise _named(_error(self.sync_history_status, "Error", "Not available"), name)
            ran = [
                {
                    "sync_id": sid,
                    "start_time": iso(began),
                    "end_time": iso(self.ended[sid][0]) if sid in self.ended else None,
                    "status": self.ended[sid][1] if sid in self.ended else None,
                }
                for c, sid, began, _ in self.started
                if c == cid and (sid in self.ended or sid == self.running.get(c, ("",))[0])
            ]
            items = sorted(
                (i for i in [*self.history.get(cid, []), *ran] if i["start_time"]),
                key=lambda i: parse_iso(i["start_time"]),
            )
        items = [i for i in items if start <= parse_iso(i["start_time"]) < end]
        return self._page(items, query)

    def _test_webhook(self, webhook_id: str, body: dict[str, Any]) -> dict[str, Any]:
        event = body.get("event")
        if not isinstance(event, str) or not event:
            raise _error(400, "InvalidInput", "Field 'event' is required")
        with self.lock:
            webhook = dict(self._known(self.webhooks, "Webhook", webhook_id))
        sample: dict[str, Any] = {
            "event": event,
            "created": iso(datetime.now(timezone.utc)),
            "connector_type": "_connector_type",
            "connector_id": "_connection_1",
            "connector_name": "_connection_1",
            "sync_id": str(uuid.uuid4()),
            "destination_group_id": "_destination_1",
        }
        if event == "sync_end":
            sample["data"] = {"status": "SUCCESSFUL"}
        got = self._deliver(webhook["url"], sample, webhook["secret"])
        ok = got.status is not None and 200 <= got.status < 300
        return {
            "code": "Success",
            "message": "Webhook has been tested",
            "data": {
                "succeed": ok,
                "status": got.status or 0,
                "message": "Success" if ok else f"Failed: {got.status or 'no answer'}",
            },
        }

    def route(
        self, method: str, path: str, query: dict[str, str], body: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """Return (the call's name in ``calls``, the answer's body); raise Answer for errors."""
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["v1", "connectors"] and len(parts) >= 3:
            name = f"{method} /v1/connectors/{{id}}" + ("/" + parts[3] if len(parts) > 3 else "")
            try:
                return name, self._legacy(method, parts, body)
            except Answer as exc:
                exc.name = name  # counted by endpoint, as it always was
                raise
        if method == "GET" and parts[:2] == ["v1", "connections"] and parts[3:] == ["sync-history"]:
            name = "GET /v1/connections/{id}/sync-history"
            return name, self._sync_history(parts[2], query)
        match (method, parts):
            case ("GET", ["v1", "connections"]):
                with self.lock:
                    items = [
                        c
                        for c in self.connectors.values()
                        if query.get("group_id") in (None, c["group_id"])
                        and query.get("schema") in (None, c["schema"])
                    ]
                return "GET /v1/connections", self._page(items, query)
            case ("GET", ["v1", "connections", cid]):
                with self.lock:
                    data = json.loads(json.dumps(self._known(self.connectors, "Connection", cid)))
                return "GET /v1/connections/{id}", {"code": "Success", "data": data}
            case ("GET", ["v1", "connections", cid, "schemas"]):
                name = "GET /v1/connections/{id}/schemas"
                with self.lock:
                    self._known(self.connectors, "Connection", cid)
                    schemas = self.schemas.get(cid)
                    data = {
                        "enable_new_by_default": True,
                        "schema_change_handling": "ALLOW_ALL",
                        "schemas": json.loads(json.dumps(schemas)),
                    }
                if schemas is None:
                    raise _named(
                        _error(
                            404,
                            "NotFound_SchemaConfig",
                            f"Schema config for connection with id '{cid}' not found",
                        ),
                        name,
                    )
                return name, {"code": "Success", "data": data}
            case ("GET", ["v1", "destinations", did]):
                with self.lock:
                    data = json.loads(
                        json.dumps(self._known(self.destinations, "Destination", did))
                    )
                return "GET /v1/destinations/{id}", {"code": "Success", "data": data}
            case ("PATCH", ["v1", "connections", cid]):
                name = "PATCH /v1/connections/{id}"
                tests = body.get("run_setup_tests", True)
                if not isinstance(tests, bool) or not set(body) - TEST_CONTROL:
                    raise _named(
                        _error(
                            400,
                            "InvalidInput",
                            "run_setup_tests must be a boolean, sent with at least one "
                            "persistent configuration parameter",
                        ),
                        name,
                    )
                with self.lock:
                    conn = self._known(self.connectors, "Connection", cid)
                    conn.update({k: v for k, v in body.items() if k in EDITABLE})
                    self.setup_tests += tests
                    data = json.loads(json.dumps(conn))
                return name, {"code": "Success", "data": data}
            case ("POST", ["v1", "connections", cid, "sync" | "resync" as what]):
                with self.lock:
                    conn = self._known(self.connectors, "Connection", cid)
                    paused = conn["paused"]
                name = f"POST /v1/connections/{{id}}/{what}"
                if paused:
                    raise _named(_error(400, "InvalidState", f"Connection '{cid}' is paused"), name)
                force = body.get("force", False)
                if not isinstance(force, bool):
                    raise _named(
                        _error(400, "InvalidInput", "Field 'force' must be a boolean"), name
                    )
                if what == "resync" and not _scope_ok(body.get("scope")):
                    message = "Field 'scope' must map schemas to non-empty lists of tables"
                    raise _named(_error(400, "InvalidInput", message), name)
                try:
                    self.start_sync(cid, force=force and what == "sync", how=what)
                except Answer as exc:
                    raise _named(exc, name) from None
                message = (
                    f"Sync has been successfully triggered for connection with id '{cid}'"
                    if what == "sync"
                    else f"Re-sync has been triggered successfully for connection with id '{cid}'"
                )
                return name, {"code": "Success", "message": message}
            case ("GET", ["v1", "groups"]):
                with self.lock:
                    items = list(self.groups.values())
                return "GET /v1/groups", self._page(items, query)
            case ("GET", ["v1", "groups", gid, "connectors"]):  # legacy
                with self.lock:
                    items = [c for c in self.connectors.values() if c["group_id"] == gid]
                return "GET /v1/groups/{id}/connectors", self._page(items, query)
            case ("GET", ["v1", "webhooks"]):
                with self.lock:
                    items = [_shown(w) for w in self.webhooks.values()]
                return "GET /v1/webhooks", self._page(items, query)
            case ("POST", ["v1", "webhooks", "account"]):
                return "POST /v1/webhooks/account", self._create_webhook(body, None)
            case ("POST", ["v1", "webhooks", "group", gid]):
                return "POST /v1/webhooks/group/{id}", self._create_webhook(body, gid)
            case ("GET", ["v1", "webhooks", wid]):
                with self.lock:
                    data = _shown(self._known(self.webhooks, "Webhook", wid))
                return "GET /v1/webhooks/{id}", {"code": "Success", "data": data}
            case ("PATCH", ["v1", "webhooks", wid]):
                return "PATCH /v1/webhooks/{id}", self._update_webhook(wid, body)
            case ("DELETE", ["v1", "webhooks", wid]):
                with self.lock:
                    self._known(self.webhooks, "Webhook", wid)
                    del self.webhooks[wid]
                message = f"Webhook with id '{wid}' has been deleted"
                return "DELETE /v1/webhooks/{id}", {"code": "Success", "message": message}
            case ("POST", ["v1", "webhooks", wid, "test"]):
                return "POST /v1/webhooks/{id}/test", self._test_webhook(wid, body)
        raise _error(404, "NotFound", f"No such endpoint: {method} {path}")

    def _authorized(self, header: str | None) -> bool:
        expected = base64.b64encode(f"{self.api_key}:{self.api_secret}".encode()).decode()
        return header == f"Basic {expected}"

    def handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any], **headers: str) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for name, value in headers.items():
                    self.send_header(name.replace("_", "-"), value)
                self.end_headers()
                self.wfile.write(raw)

            def _route(self, method: str) -> None:
                split = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(split.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length)) if length else {}
                except ValueError:
                    body = None
                if api.delay_seconds:
                    time.sleep(api.delay_seconds)
                if not api._authorized(self.headers.get("Authorization")):
                    with api.lock:
                        api.calls["401"] += 1
                    self._answer(
                        401, {"code": "AuthFailed", "message": "Invalid API key or secret"}
                    )
                    return
                with api.lock:
                    fault = api._faults.pop(0) if api._faults else None
                if fault is not None:
                    status, retry_after = fault
                    with api.lock:
                        api.calls[str(status)] += 1
                    extra = {"Retry_After": retry_after} if retry_after is not None else {}
                    message = "Too many requests" if status == 429 else "Something went wrong"
                    self._answer(
                        status,
                        {
                            "code": "TooManyRequests" if status == 429 else "Error",
                            "message": message,
                        },
                        **extra,
                    )
                    return
                if not isinstance(body, dict):
                    self._answer(
                        400, {"code": "InvalidInput", "message": "Body must be a JSON object"}
                    )
                    return
                try:
                    name, answer = api.route(method, split.path, query, body)
                except Answer as exc:
                    with api.lock:
                        api.calls[exc.name or str(exc.status)] += 1
                    self._answer(exc.status, exc.body)
                    return
                with api.lock:
                    api.calls[name] += 1
                self._answer(200, answer)

            def do_GET(self) -> None:
                self._route("GET")

            def do_PATCH(self) -> None:
                self._route("PATCH")

            def do_POST(self) -> None:
                self._route("POST")

            def do_DELETE(self) -> None:
                self._route("DELETE")

        return Handler


#: The connection fields ``PATCH /v1/connections/{id}`` changes here.
EDITABLE = frozenset({"paused", "schedule_type", "sync_frequency"})
#: The PATCH fields that only steer its setup tests and cannot be sent alone.
TEST_CONTROL = frozenset({"run_setup_tests", "trust_certificates", "trust_fingerprints"})
#: What PATCH /v1/webhooks/{id} may change.
WEBHOOK_FIELDS = frozenset({"url", "events", "active", "secret"})


def _scope_ok(scope: Any) -> bool:
    """A resync's ``scope``: absent or null (everything), else non-empty lists per schema."""
    if scope is None:
        return True
    return (
        isinstance(scope, dict)
        and bool(scope)
        and all(
            isinstance(t, list) and t and all(isinstance(n, str) for n in t) for t in scope.values()
        )
    )


def _named(answer: Answer, name: str) -> Answer:
    answer.name = name
    return answer


def _shown(webhook: dict[str, Any]) -> dict[str, Any]:
    """A webhook as Fivetran answers it: the secret masked."""
    return {**webhook, "secret": "******"}


@contextmanager
def serving(api: FivetranStandIn) -> Iterator[FivetranStandIn]:
    """Serve ``api`` on a free 127.0.0.1 port for the duration of the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), api.handler())
    api.server = server
    with serving_in_thread(server):
        yield api
