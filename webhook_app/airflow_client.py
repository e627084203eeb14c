"""A small client of Airflow's REST API: post dataset (asset) events and find them again.

Airflow 3 (``/api/v2``): a cached JWT, events posted by asset id; Airflow 2.9-2.11
(``/api/v1``): basic auth, events posted by ``dataset_uri``. Airflow has no idempotency
key, so ``find_event`` looks an event up by its ``extra`` (and partition key) before a
second POST. Partitioned asset events (a ``partition_key`` in the POST) need Airflow
3.2+: ``partitions_refused`` says why an older one cannot take them.
"""

from __future__ import annotations

import base64
import json
import math
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol
from urllib.parse import quote

import requests

from fivetran_events import ConfigurationError, Settings
from fivetran_events.http import RetryableError, never_sent, quoted, retry_after_seconds
from fivetran_events.timeutil import iso, parse_iso

#: Renew a cached JWT this long before Airflow would refuse it.
TOKEN_MARGIN_SECONDS = 60.0
#: Seconds an asset id found by URI is trusted before it is looked up again.
ASSET_CACHE_SECONDS = 300.0
#: Assets or events examined per page when looking one up.
LOOKUP_PAGE = 100
#: Answers that say the request was not handled at all (nothing can have been created).
NOT_HANDLED = frozenset({429, 503})
#: The first Airflow whose ``POST /api/v2/assets/events`` takes a ``partition_key``.
PARTITIONS_SINCE = (3, 2)


class AirflowError(Exception):
    """Base class of the errors this client raises."""


class AirflowUnavailable(AirflowError, RetryableError):
    """Raised on connection errors, timeouts, 5xx and 429: retry, after ``retry_after`` if
    set; ``maybe_sent`` is False only when the request certainly never reached Airflow."""

    def __init__(
        self,
        message: str,
        retry_after: float | None = None,
        maybe_sent: bool = True,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.maybe_sent = maybe_sent
        self.status = status


class AssetNotFound(AirflowError):
    """Raised when Airflow knows no dataset/asset with the URI (no DAG uses it yet)."""


class AirflowRejected(AirflowError):
    """Raised on a 4xx other than 404 and 429 (after one token refresh on 401)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"Airflow answered {status}: {body}")
        self.status = status
        self.body = body


@contextmanager
def unexpected_answer_is_a_retry(what: str) -> Iterator[None]:
    """Classify an answer that is not Airflow's JSON (a proxy's error page) as a retry; wrap
    only the parsing, so a bug of ours elsewhere fails the job instead of retrying."""
    try:
        yield
    except (ValueError, KeyError, TypeError) as exc:
        raise AirflowUnavailable(
            f"unexpected answer from Airflow to {what}: {type(exc).__name__}: {exc}"
        ) from None


def body_text(resp: requests.Response) -> str:
    return quoted(resp.text or resp.reason)


class SharedAssetIds(Protocol):
    """Asset ids shared by a worker pool's processes: N ask Airflow once per URI, not N times."""

    def get(self, uri: str) -> int | None: ...

    def put(self, uri: str, asset_id: int, ttl_s: float) -> None: ...

    def drop(self, uri: str) -> None: ...


@dataclass(frozen=True)
class AirflowEvent:
    id: int
    uri: str | None
    timestamp: datetime
    extra: dict[str, Any]
    partition_key: str | None = None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> AirflowEvent:
        return cls(
            id=int(body["id"]),
            uri=body.get("uri") or body.get("dataset_uri"),
            timestamp=parse_iso(str(body["timestamp"])),
            extra=dict(body.get("extra") or {}),
            partition_key=body.get("partition_key") or None,
        )


def renew_after(token: str) -> float:
    """Seconds after fetching a JWT to fetch the next: its life is ``exp - iat``, both
    Airflow's clock, so a worker whose clock is off still renews in time."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        life = float(claims["exp"]) - float(claims["iat"])
    except (IndexError, ValueError, KeyError, TypeError):
        return 3600.0
    if not math.isfinite(life) or life <= 0:
        return 0.0
    return life - min(TOKEN_MARGIN_SECONDS, life / 2)


class AirflowClient:
    """Talk to one Airflow; keeps the JWT and the asset ids it found (per process)."""

    def __init__(
        self,
        base_url: str,
        username: str,
        password: str,
        *,
        api_version: str = "auto",
        timeout: float = 10.0,
        verify: bool | str = True,
        session: requests.Session | None = None,
        asset_cache_seconds: float = ASSET_CACHE_SECONDS,
        shared_assets: SharedAssetIds | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.username = username
        self.password = password
        self._version = None if api_version == "auto" else api_version
        self.timeout = timeout
        self.session = session or requests.Session()
        self.session.verify = verify
        self.asset_cache_seconds = asset_cache_seconds
        self._token: str | None = None
        self._token_expires = 0.0
        self._assets: dict[str, tuple[int, float]] = {}
        self.shared_assets = shared_assets
        self.tokens_fetched = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> AirflowClient:
        if not settings.airflow_url:
            raise ConfigurationError(
                "FIVETRAN_EVENTS_AIRFLOW_URL is not set: set it to "
                "Airflow's API server, e.g. http://127.0.0.1:8080"
            )
        user, password = settings.airflow_credentials()
        verify: bool | str = settings.airflow_verify_tls
        if settings.airflow_ca_bundle:
            verify = settings.airflow_ca_bundle
        return cls(
            settings.airflow_url,
            user,
            password,
            api_version=settings.airflow_api_version,
            timeout=settings.airflow_timeout_seconds,
            verify=verify,
        )

    def _send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = self.base_url + path
        try:
            resp = self.session.request(method, url, timeout=(self.timeout, self.timeout), **kwargs)
        except requests.RequestException as exc:
            raise AirflowUnavailable(
                f"{method} {path}: {type(exc).__name__}: {exc}", maybe_sent=not never_sent(exc)
            ) from None
        if resp.status_code == 429 or resp.status_code >= 500:
            # 429 and 503 say the request was not handled; a 500, 502 or 504 may come
            # after Airflow committed it (or while it still does), so its outcome is open.
            raise AirflowUnavailable(
                f"{method} {path}: Airflow answered {resp.status_code}: {body_text(resp)}",
                retry_after=retry_after_seconds(resp.headers.get("Retry-After")),
                maybe_sent=resp.status_code not in NOT_HANDLED,
                status=resp.status_code,
            )
        return resp

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """Send with the right authentication; on a 401 renew the JWT once and resend."""
        if self.version() == "2":
            resp = self._send(method, path, auth=(self.username, self.password), **kwargs)
            if resp.status_code == 401:  # the same 401 for a wrong password or no basic auth
                raise AirflowRejected(
                    401,
                    f"{body_text(resp)}; Airflow 2 takes basic auth only if its [api] "
                    "auth_backends includes airflow.api.auth.backend.basic_auth (the default "
                    f"is session auth only); else user '{self.username}' or the password is wrong",
                )
            return resp
        resp = self._send(method, path, headers=self._auth_header(), **kwargs)
        if resp.status_code == 401:
            self._token = None
            resp = self._send(method, path, headers=self._auth_header(), **kwargs)
        return resp

    def _auth_header(self) -> dict[str, str]:
        if self._token is None or time.time() >= self._token_expires:
            self._token = self._fetch_token()
        return {"Authorization": f"Bearer {self._token}"}

    def _fetch_token(self) -> str:
        resp = self._send(
            "POST", "/auth/token", json={"username": self.username, "password": self.password}
        )
        if resp.status_code not in (200, 201):
            raise AirflowRejected(
                resp.status_code,
                f"cannot get a token for user '{self.username}': {body_text(resp)}",
            )
        with unexpected_answer_is_a_retry("POST /auth/token"):
            token = str(resp.json()["access_token"])
        self.tokens_fetched += 1
        self._token_expires = time.time() + renew_after(token)
        return token

    def version(self) -> str:
        """Return "3" or "2": configured, or detected from which health endpoint answers."""
        if self._version is None:
            if self._send("GET", "/api/v2/monitor/health").status_code == 200:
                self._version = "3"
            elif self._send("GET", "/api/v1/health").status_code == 200:
                self._version = "2"
            else:
                raise AirflowRejected(
                    404,
                    f"{self.base_url} answers neither /api/v2 nor /api/v1: "
                    "is FIVETRAN_EVENTS_AIRFLOW_URL Airflow's API server?",
                )
        return self._version

    def partitions_refused(self) -> str | None:
        """Return why this Airflow takes no partitioned asset events (None: it does)."""
        path = "/api/v1/version" if self.version() == "2" else "/api/v2/version"
        resp = self._request("GET", path)
        self._check(resp)
        with unexpected_answer_is_a_retry(f"GET {path}"):
            version = str(resp.json()["version"])
        if tuple(int(p) for p in re.findall(r"\d+", version)[:2]) >= PARTITIONS_SINCE:
            return None
        return (
            f"FIVETRAN_EVENTS_PARTITION_GRAIN needs Airflow 3.2 or later (a partition_key in "
            f"asset events), but {self.base_url} runs Airflow {version}: upgrade it or unset "
            "FIVETRAN_EVENTS_PARTITION_GRAIN"
        )

    def warm_up(self) -> None:
        """Learn the API version and fetch a token before a delivery has to wait for them."""
        if self.version() != "2":
            self._auth_header()

    def asset_id(self, uri: str, refresh: bool = False) -> int:
        """Return the id of the asset/dataset whose URI is exactly ``uri``."""
        cached = self._assets.get(uri)
        if cached and not refresh and time.monotonic() < cached[1]:
            return cached[0]
        shared = self.shared_assets
        if shared is not None and not refresh:
            known = shared.get(uri)
            if known is not None:
                # An id is at most two periods old; a 404 on the POST looks it up again.
                self._cache(uri, known, share=False)
                return known
        found = self._lookup_asset(uri)
        if found is None:
            self._assets.pop(uri, None)
            if shared is not None:
                shared.drop(uri)
            raise AssetNotFound(
                f"Airflow has no dataset with URI '{uri}': no DAG schedules "
                "on it or produces it yet"
            )
        self._cache(uri, found)
        return found

    def _cache(self, uri: str, asset_id: int, share: bool = True) -> None:
        self._assets[uri] = (asset_id, time.monotonic() + self.asset_cache_seconds)
        if share and self.shared_assets is not None:
            self.shared_assets.put(uri, asset_id, self.asset_cache_seconds)

    def _lookup_asset(self, uri: str) -> int | None:
        if self.version() == "2":
            resp = self._request("GET", "/api/v1/datasets/" + quote(uri, safe=""))
            if resp.status_code == 404:
                return None
            self._check(resp)
            with unexpected_answer_is_a_retry("GET /api/v1/datasets"):
                return int(resp.json()["id"])
        params = {"uri_pattern": uri, "order_by": "id"}
        for assets in self._pages("/api/v2/assets", params, "assets"):
            with unexpected_answer_is_a_retry("GET /api/v2/assets"):
                for asset in assets:  # uri_pattern is a substring match
                    if asset.get("uri") == uri:
                        return int(asset["id"])
        return None

    def _pages(self, path: str, params: dict[str, Any], key: str) -> Iterator[list[Any]]:
        offset = 0
        while True:
            resp = self._request(
                "GET", path, params={**params, "limit": LOOKUP_PAGE, "offset": offset}
            )
            self._check(resp)
            with unexpected_answer_is_a_retry(f"GET {path}"):
                body = resp.json()
                items = list(body.get(key, []))
                total = int(body.get("total_entries", 0))
            yield items
            offset += len(items)
            if not items or offset >= total:
                return

    def assets_under(self, prefix: str) -> dict[str, list[str]]:
        """Return each asset URI starting with ``prefix`` -> its DAGs (filling the id cache)."""
        v2 = self.version() == "2"
        path, key, dags = (
            ("/api/v1/datasets", "datasets", "consuming_dags")
            if v2
            else ("/api/v2/assets", "assets", "scheduled_dags")
        )
        out: dict[str, list[str]] = {}
        for page in self._pages(path, {"uri_pattern": prefix, "order_by": "id"}, key):
            with unexpected_answer_is_a_retry(f"GET {path}"):
                for asset in page:
                    uri = str(asset.get("uri", ""))
                    if not uri.startswith(prefix):
                        continue
                    out[uri] = sorted(str(r.get("dag_id")) for r in asset.get(dags) or [])
                    self._cache(uri, int(asset["id"]))
        return out

    def prepare(self, uri: str) -> None:
        """Fetch what a POST needs first, so the in-flight mark's time is the POST's own."""
        if self.version() != "2":
            self.asset_id(uri)

    def known(self, uri: str) -> bool:
        try:
            self.asset_id(uri, refresh=True)
        except AssetNotFound:
            return False
        return True

    def post_event(
        self, uri: str, extra: Mapping[str, Any], partition_key: str | None = None
    ) -> AirflowEvent:
        if self.version() == "2":
            resp = self._request(
                "POST", "/api/v1/datasets/events", json={"dataset_uri": uri, "extra": dict(extra)}
            )
            if resp.status_code == 404:
                raise AssetNotFound(
                    f"Airflow 2 answered 404 for dataset '{uri}': {body_text(resp)}"
                )
        else:
            # A 404 on the cached id: the asset went away since; look it up once more.
            for refresh in (False, True):
                asset = self.asset_id(uri, refresh=refresh)
                body: dict[str, Any] = {"asset_id": asset, "extra": dict(extra)}
                if partition_key is not None:
                    body["partition_key"] = partition_key
                resp = self._request("POST", "/api/v2/assets/events", json=body)
                if resp.status_code != 404:
                    break
            else:
                raise AssetNotFound(
                    f"Airflow answered 404 for asset '{uri}' (id {asset}): {body_text(resp)}"
                )
        self._check(resp)
        with unexpected_answer_is_a_retry("POST of an event"):
            return AirflowEvent.from_json(resp.json())

    def find_event(
        self,
        uri: str,
        since: datetime,
        match: Mapping[str, Any],
        partition_key: str | None = None,
    ) -> AirflowEvent | None:
        """Return the event on ``uri`` at or after ``since`` whose extra contains ``match``
        and whose partition key is ``partition_key`` (a plain event has none: a sync's
        partitioned events on the same asset carry the same extra)."""
        v2 = self.version() == "2"
        asset = self.asset_id(uri)
        if v2:
            path, key = "/api/v1/datasets/events", "dataset_events"
            params: dict[str, Any] = {"dataset_id": asset, "order_by": "-timestamp"}
        else:
            path, key = "/api/v2/assets/events", "asset_events"
            params = {"asset_id": asset, "order_by": "-timestamp", "timestamp_gte": iso(since)}
        for page in self._pages(path, params, key):
            with unexpected_answer_is_a_retry(f"GET {path}"):
                events = [AirflowEvent.from_json(e) for e in page]
            for ev in events:
                if ev.partition_key == partition_key and all(
                    ev.extra.get(k) == v for k, v in match.items()
                ):
                    return ev
            # Newest first: once a page reaches before ``since`` nothing older can match.
            if events and events[-1].timestamp < since:
                return None
        return None

    @staticmethod
    def _check(resp: requests.Response) -> None:
        if resp.status_code >= 400:
            raise AirflowRejected(resp.status_code, body_text(resp))


def lookup_window_start(mark_ms: int, slack: timedelta = timedelta(minutes=2)) -> datetime:
    """Where to start looking for an event posted by an attempt that began at ``mark_ms``."""
    return datetime.fromtimestamp(mark_ms / 1000, tz=timezone.utc) - slack
