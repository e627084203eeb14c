"""A client of Fivetran's REST API: connections, groups, destinations, webhooks.

It speaks ``/v1/connections`` (``/v1/connectors`` answers 404 for some accounts). A 429 or 503
is waited out up to ``max_retry_after``; a connection never made is retried, and for requests
safe to repeat so are timeouts, resets and other 5xx (``http.classify`` judges every answer).
The key and secret are in no message, log line or ``repr``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import requests

from .exceptions import (
    FIVETRAN,
    ConfigurationError,
    FivetranApiError,
    FivetranUnavailable,
)
from .fivetran_records import (
    Connection,
    Destination,
    Group,
    SyncRecord,
    Webhook,
    WebhookTest,
    text_field,
)
from .http import backoff, classify, quoted, unreachable
from .model import LIFECYCLE_EVENTS, RESYNC_EVENTS
from .settings import DEFAULT_FIVETRAN_API_URL, Settings, check_api_url
from .timeutil import iso

log = logging.getLogger(__name__)

#: Seconds to connect, and again to read.
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_MAX_RETRY_AFTER = 60.0
DEFAULT_BACKOFF = 0.5
MAX_BACKOFF = 8.0
#: Fivetran's largest page.
PAGE_SIZE = 1000
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
#: The longest time range one sync-history call may ask for.
SYNC_HISTORY_WINDOW = timedelta(days=7)
#: The Accept header the connection endpoints document (their version 2 answers).
CONNECTIONS_ACCEPT = "application/json;version=2"
#: The events a webhook created for the service subscribes to.
SERVICE_EVENTS: tuple[str, ...] = (
    "sync_start",
    "sync_end",
    *sorted(RESYNC_EVENTS),
    *LIFECYCLE_EVENTS,
)


def _segment(value: str) -> str:
    """An id as one path segment: ``/`` or ``..`` in it cannot reach another endpoint."""
    return quote(value, safe="")


def resync_scope(scope: Mapping[str, Sequence[str]] | None) -> dict[str, list[str]] | None:
    """``scope`` as the resync endpoint takes it, schema -> table names, or None (the whole
    connection). Fivetran answers 400 to an empty scope or an empty table list
    (fivetran.com/docs/rest-api/api-reference/connections/resync-connection), so they,
    and a bare string for a list, raise ValueError: an empty one must never mean "all"."""
    if scope is None:
        return None
    if not isinstance(scope, Mapping) or not scope:
        raise ValueError("a resync scope names at least one schema and its tables")
    checked: dict[str, list[str]] = {}
    for schema, tables in scope.items():
        names = [] if isinstance(tables, str) else list(tables)
        if not isinstance(schema, str) or not schema or not names:
            raise ValueError(f"resync scope {schema!r}: give a non-empty list of table names")
        if not all(isinstance(t, str) and t for t in names):
            raise ValueError(f"resync scope {schema!r}: table names are non-empty strings")
        checked[schema] = names
    return checked


class FivetranClient:
    """Fivetran's REST API with one account's key and secret."""

    def __init__(
        self,
        api_key: str,
        api_secret: str,
        base_url: str = DEFAULT_FIVETRAN_API_URL,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
        backoff: float = DEFAULT_BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not api_key or not api_secret:
            raise ConfigurationError("Fivetran's API key and secret must both be given")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        try:
            self.base_url = check_api_url(base_url)
        except ValueError as exc:
            raise ConfigurationError(f"Fivetran API URL {base_url!r}: {exc}") from None
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.max_retry_after = max_retry_after
        self.backoff = backoff
        self._sleep = sleep
        self.session = requests.Session()
        self.session.auth = (api_key, api_secret)
        self.session.headers.update({"Accept": "application/json", "User-Agent": "fivetran-events"})

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: Any) -> FivetranClient:
        key = settings.fivetran_api_key.get_secret_value() if settings.fivetran_api_key else ""
        secret = (
            settings.fivetran_api_secret.get_secret_value() if settings.fivetran_api_secret else ""
        )
        missing = [
            f"FIVETRAN_EVENTS_FIVETRAN_API_{name}"
            for name, value in (("KEY", key), ("SECRET", secret))
            if not value
        ]
        if missing:
            raise ConfigurationError(
                f"{' and '.join(missing)} must be set to call Fivetran's API (a Fivetran "
                "API key and its secret; or files of those names, in lower case, in "
                "FIVETRAN_EVENTS_SECRETS_DIR)"
            )
        return cls(key, secret, settings.fivetran_api_url, **kwargs)

    def __repr__(self) -> str:
        return f"FivetranClient(base_url={self.base_url!r})"

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> FivetranClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connections(
        self, group_id: str | None = None, *, schema: str | None = None
    ) -> list[Connection]:
        params = {k: v for k, v in (("group_id", group_id), ("schema", schema)) if v}
        return [
            Connection.from_json(item)
            for item in self.items("/v1/connections", params, accept=CONNECTIONS_ACCEPT)
        ]

    def connection(self, connection_id: str) -> Connection:
        path = f"/v1/connections/{_segment(connection_id)}"
        return Connection.from_json(self._one("GET", path, accept=CONNECTIONS_ACCEPT))

    def groups(self) -> list[Group]:
        return [Group.from_json(item) for item in self.items("/v1/groups")]

    def sync_history(self, connection_id: str, start: datetime, end: datetime) -> list[SyncRecord]:
        """The connection's syncs from ``start`` to ``end``, in windows of at most 7 days
        (fivetran.com/docs/rest-api/api-reference/connections/retrieve-connection-sync-history)."""
        path = f"/v1/connections/{_segment(connection_id)}/sync-history"
        out: list[SyncRecord] = []
        while start < end:
            until = min(end, start + SYNC_HISTORY_WINDOW)
            params = {"start_time": iso(start) or "", "end_time": iso(until) or ""}
            items = self.items(path, params, accept=CONNECTIONS_ACCEPT)
            out.extend(SyncRecord.from_json(item) for item in items)
            start = until
        return out

    def destination(self, destination_id: str) -> Destination:
        path = f"/v1/destinations/{_segment(destination_id)}"
        return Destination.from_json(self._one("GET", path))

    def schema_config(self, connection_id: str) -> Mapping[str, Any]:
        return self._one("GET", f"/v1/connections/{_segment(connection_id)}/schemas")

    def update_connection(self, connection_id: str, fields: Mapping[str, Any]) -> Connection:
        """Change ``fields`` of the connection. Setup tests are skipped unless ``fields``
        asks for them: Fivetran runs them on every PATCH by default, slowly and under their
        own rate limit (fivetran.com/docs/rest-api/api-reference/connections/modify-connection)."""
        path = f"/v1/connections/{_segment(connection_id)}"
        body = {"run_setup_tests": False, **fields}
        return Connection.from_json(self._one("PATCH", path, body=body, accept=CONNECTIONS_ACCEPT))

    def sync_connection(self, connection_id: str, *, force: bool = False) -> None:
        """Ask Fivetran to sync the connection now: without ``force`` a running sync is left
        alone (none starts), with it stopped and run again. The 200 says not whether one did."""
        path = f"/v1/connections/{_segment(connection_id)}/sync"
        self.request("POST", path, body={"force": force})

    def resync_connection(
        self, connection_id: str, scope: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        """Resync the whole connection (``scope`` None), or ``scope`` only; Fivetran
        completes a running sync first, or answers 409 when it cannot."""
        path = f"/v1/connections/{_segment(connection_id)}/resync"
        checked = resync_scope(scope)
        self.request("POST", path, body=None if checked is None else {"scope": checked})

    def webhooks(self) -> list[Webhook]:
        return [Webhook.from_json(item) for item in self.items("/v1/webhooks")]

    def webhook(self, webhook_id: str) -> Webhook:
        return Webhook.from_json(self._one("GET", f"/v1/webhooks/{_segment(webhook_id)}"))

    def create_account_webhook(
        self, url: str, events: Sequence[str], secret: str, *, active: bool = True
    ) -> Webhook:
        """Create a webhook for every connection's events. Fivetran first POSTs a
        ``test_event`` to ``url`` (when ``active``) and answers 400 unless that gets a 2xx."""
        body = {"url": url, "events": list(events), "active": active, "secret": secret}
        return Webhook.from_json(self._one("POST", "/v1/webhooks/account", body=body))

    def create_group_webhook(
        self, group_id: str, url: str, events: Sequence[str], secret: str, *, active: bool = True
    ) -> Webhook:
        body = {"url": url, "events": list(events), "active": active, "secret": secret}
        path = f"/v1/webhooks/group/{_segment(group_id)}"
        return Webhook.from_json(self._one("POST", path, body=body))

    def update_webhook(
        self, webhook_id: str, fields: Mapping[str, Any], *, run_tests: bool = True
    ) -> Webhook:
        """Change ``fields`` (url, events, active, secret) of the webhook. With ``run_tests``
        Fivetran first POSTs a ``test_event`` to its URL, signed with its (new) secret,
        and answers 400, changing nothing, unless that gets a 2xx."""
        body = {**fields, "run_tests": run_tests}
        path = f"/v1/webhooks/{_segment(webhook_id)}"
        return Webhook.from_json(self._one("PATCH", path, body=body))

    def test_webhook(self, webhook_id: str, event: str = "sync_start") -> WebhookTest:
        path = f"/v1/webhooks/{_segment(webhook_id)}/test"
        return WebhookTest.from_json(self._one("POST", path, body={"event": event}))

    def items(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        page_size: int = PAGE_SIZE,
        accept: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        seen: set[str] = set()
        query = dict(params or {})
        while True:
            data = self.request(
                "GET", path, params={**query, "limit": str(page_size)}, accept=accept
            )
            items = data.get("items") if isinstance(data, Mapping) else None
            if not isinstance(items, list):
                raise FivetranUnavailable(
                    "GET", path, "the answer has no data.items list: not a Fivetran collection"
                )
            yield from (item for item in items if isinstance(item, dict))
            cursor = data.get("next_cursor")
            if not isinstance(cursor, str) or not cursor:
                return
            if cursor in seen:  # a server handing back an old cursor would loop forever
                raise FivetranUnavailable("GET", path, f"next_cursor {cursor!r} came back twice")
            seen.add(cursor)
            query["cursor"] = cursor

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        accept: str | None = None,
    ) -> Any:
        """Send one call, retried as the module says; return the answer's ``data``."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._once(method, path, params, body, accept)
            except FivetranUnavailable as exc:
                wait = self._retry_wait(method, exc, attempt)
                if wait is None:
                    raise
                log.warning(
                    "%s; retrying in %.1f s (attempt %d of %d)",
                    exc,
                    wait,
                    attempt + 1,
                    self.max_attempts,
                )
                self._sleep(wait)

    def _one(self, method: str, path: str, **kwargs: Any) -> Mapping[str, Any]:
        data = self.request(method, path, **kwargs)
        if not isinstance(data, Mapping):
            raise FivetranUnavailable(method, path, "the answer's data is not an object")
        return data

    def _retry_wait(self, method: str, exc: FivetranUnavailable, attempt: int) -> float | None:
        """The pause before trying ``exc``'s call again, or None to give up."""
        if attempt >= self.max_attempts:
            exc.args = (f"{exc.args[0]} (gave up after {attempt} attempts)",)
            return None
        if exc.maybe_sent and method not in IDEMPOTENT:
            return None
        if exc.retry_after is None:
            return backoff(attempt, self.backoff, MAX_BACKOFF)
        if exc.retry_after > self.max_retry_after:
            exc.args = (
                f"{exc.args[0]} (Fivetran asked to retry after {exc.retry_after:g} s, longer "
                f"than the {self.max_retry_after:g} s this client waits)",
            )
            return None
        return exc.retry_after

    def _once(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: Mapping[str, Any] | None,
        accept: str | None,
    ) -> Any:
        headers = {"Accept": accept} if accept else None
        try:
            resp = self.session.request(
                method,
                self.base_url + path,
                params=params,
                json=body,
                headers=headers,
                timeout=(self.timeout, self.timeout),
            )
        except requests.RequestException as exc:
            raise unreachable(FIVETRAN, method, path, self.base_url, exc, self.timeout) from None
        return self._answer(method, path, resp)

    def _answer(self, method: str, path: str, resp: requests.Response) -> Any:
        status = resp.status_code
        try:
            doc = resp.json()
        except ValueError:
            doc = None
        code = text_field(doc.get("code")) if isinstance(doc, dict) else None
        message = text_field(doc.get("message")) if isinstance(doc, dict) else None
        if 200 <= status < 300:
            if not isinstance(doc, dict):
                raise FivetranUnavailable(
                    method,
                    path,
                    f"Fivetran answered {status} with a body that is not its JSON: "
                    f"{quoted(resp.text or '(empty)')}",
                    status=status,
                    maybe_sent=True,
                )
            data = doc.get("data")
            return data if data is not None else {}
        said = " ".join(p for p in (code, message) if p) or None
        error = classify(FIVETRAN, method, path, resp, said)
        assert isinstance(error, FivetranApiError)  # a 2xx returned above
        error.code, error.message = code, message
        raise error
