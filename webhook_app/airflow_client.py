"""A small client of Airflow's REST API: post dataset (asset) events and find them again.

Airflow 3 (``/api/v2``): a cached bearer token (a JWT from a password, or managed Airflow's
token: airflow_auth.py), events posted by asset id; Airflow 2.9-2.11 (``/api/v1``): basic
auth, events posted by ``dataset_uri``. Failed requests are http.py's errors (``classify``).
Airflow has no idempotency key, so ``find_event`` looks an event up by its ``extra`` (and
partition key) before a second POST. Partitioned asset events need Airflow 3.2+
(``partitions_refused`` says why an older one cannot take them).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

import requests

from fivetran_events import ConfigurationError, Settings
from fivetran_events.http import classify, quoted, unreachable
from fivetran_events.timeutil import iso, parse_iso

from .airflow_auth import Login, PasswordLogin, login_from_settings
from .exceptions import AIRFLOW, AirflowNotFound, AirflowRejected, AirflowUnavailable, AssetNotFound

#: Seconds an asset id found by URI is trusted before it is looked up again.
ASSET_CACHE_SECONDS = 300.0
#: Assets or events examined per page when looking one up.
LOOKUP_PAGE = 100
#: The first Airflow whose ``POST /api/v2/assets/events`` takes a ``partition_key``.
PARTITIONS_SINCE = (3, 2)


@contextmanager
def unexpected_answer_is_a_retry(what: str) -> Iterator[None]:
    """Classify an answer that is not Airflow's JSON (a proxy's error page) as a retry; wrap
    only the parsing, so a bug of ours elsewhere fails the job instead of retrying."""
    try:
        yield
    except (ValueError, KeyError, TypeError) as exc:
        method, _, path = what.partition(" ")
        raise AirflowUnavailable(
            method, path, f"unexpected answer from Airflow: {type(exc).__name__}: {exc}"
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


class AirflowClient:
    """Talk to one Airflow, keeping the token and asset ids it found (per process); ``login``
    is how it logs in (airflow_auth.py), else ``username`` and ``password``."""

    def __init__(
        self,
        base_url: str,
        username: str = "",
        password: str = "",
        *,
        login: Login | None = None,
        api_version: str = "auto",
        timeout: float = 10.0,
        verify: bool | str = True,
        session: requests.Session | None = None,
        asset_cache_seconds: float = ASSET_CACHE_SECONDS,
        shared_assets: SharedAssetIds | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.login = login or PasswordLogin(username, password)
        self._version = None if api_version == "auto" else api_version
        self.timeout = timeout
        self.session = session or requests.Session()
        self.session.verify = verify
        self.asset_cache_seconds = asset_cache_seconds
        self._token: str | None = None
        self._token_expires = 0.0
        self._assets: dict[str, tuple[int, float]] = {}
        self.shared_assets = shared_assets
        #: Tokens got from the login (POSTs to /auth/token, a command's runs, a file's reads).
        self.tokens_fetched = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> AirflowClient:
        if not settings.airflow_url:
            raise ConfigurationError(
                "FIVETRAN_EVENTS_AIRFLOW_URL is not set: set it to "
                "Airflow's API server, e.g. http://127.0.0.1:8080"
            )
        verify: bool | str = settings.airflow_verify_tls
        if settings.airflow_ca_bundle:
            verify = settings.airflow_ca_bundle
        return cls(
            settings.airflow_url,
            login=login_from_settings(settings),
            api_version=settings.airflow_api_version,
            timeout=settings.airflow_timeout_seconds,
            verify=verify,
        )

    def _send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = self.base_url + path
        try:
            resp = self.session.request(method, url, timeout=(self.timeout, self.timeout), **kwargs)
        except requests.RequestException as exc:
            raise unreachable(AIRFLOW, method, path, self.base_url, exc, self.timeout) from None
        error = classify(AIRFLOW, method, path, resp)
        # 4xx are the caller's to read (a 401 renews the token, a 404 may be "no asset").
        if isinstance(error, AirflowUnavailable):
            raise error
        return resp

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """Send with the login's authentication; on a 401 get a fresh token once and
        resend; a login with no other token, or a fresh token refused too, is given up."""
        basic = self.login.basic
        if self.version() == "2" and basic is not None:
            resp = self._send(method, path, auth=basic, **kwargs)
            if resp.status_code == 401:  # the same 401 for a wrong password or no basic auth
                reason = (
                    f"Airflow answered 401: {body_text(resp)}; Airflow 2 takes basic auth only "
                    "if its [api] auth_backends includes airflow.api.auth.backend.basic_auth "
                    f"(the default is session auth only); else user '{basic[0]}' or the "
                    "password is wrong"
                )
                raise AirflowRejected(method, path, reason, 401)
            return resp
        resp = self._send(method, path, headers=self._auth_header(method, path), **kwargs)
        if resp.status_code != 401:
            return resp
        refused, self._token = self._token, None
        header = self._auth_header(method, path)
        where = f"Airflow answered 401 ({body_text(resp)}) to the token from {self.login.describe}"
        if self._token == refused:
            why = f"{where}, which has no other"
        else:
            resp = self._send(method, path, headers=header, **kwargs)
            if resp.status_code != 401:
                return resp
            why = f"{where} and again to a fresh one ({body_text(resp)})"
        reason = f"{why}: given up, not retried; fix the login and replay"
        raise AirflowRejected(method, path, reason, 401)

    def _auth_header(self, method: str, path: str) -> dict[str, str]:
        """The login's current token, got again when it ended or its source changed."""
        if self._token is None or time.time() >= self._token_expires or self.login.changed():
            token, life = self.login.token(self._send, method, path)
            self._token, self._token_expires = token, time.time() + life
            self.tokens_fetched += 1
        return {"Authorization": f"Bearer {self._token}"}

    def version(self) -> str:
        """Return "3" or "2": configured, or detected from which health endpoint answers."""
        if self._version is None:
            if self._send("GET", "/api/v2/monitor/health").status_code == 200:
                self._version = "3"
            elif self._send("GET", "/api/v1/health").status_code == 200:
                self._version = "2"
            else:
                why = f"{self.base_url} answers neither /api/v2 nor /api/v1: is "
                why += "FIVETRAN_EVENTS_AIRFLOW_URL Airflow's API server?"
                raise AirflowNotFound("GET", "/api/v1/health", why, 404)
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
        if self.version() != "2" or self.login.basic is None:
            self._auth_header("GET", "/api/v2/assets")

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
            path = "/api/v1/datasets" if self.version() == "2" else "/api/v2/assets"
            why = f"Airflow has no dataset with URI '{uri}': no DAG schedules on it or "
            why += "produces it yet"
            raise AssetNotFound("GET", path, why)
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
                why = f"Airflow 2 answered 404 for dataset '{uri}': {body_text(resp)}"
                raise AssetNotFound("POST", "/api/v1/datasets/events", why, 404)
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
                why = f"Airflow answered 404 for asset '{uri}' (id {asset}): {body_text(resp)}"
                raise AssetNotFound("POST", "/api/v2/assets/events", why, 404)
        self._check(resp)
        with unexpected_answer_is_a_retry("POST /api/v2/assets/events"):
            return AirflowEvent.from_json(resp.json())

    def find_event(
        self, uri: str, since: datetime, match: Mapping[str, Any], partition_key: str | None = None
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
        """Raise what a 4xx means (``_send`` raised the 5xx and 429 already)."""
        sent = resp.request
        error = classify(AIRFLOW, sent.method or "", urlsplit(sent.url or "").path, resp)
        if error is not None:
            raise error


def lookup_window_start(mark_ms: int, slack: timedelta = timedelta(minutes=2)) -> datetime:
    """Where to start looking for an event posted by an attempt that began at ``mark_ms``."""
    return datetime.fromtimestamp(mark_ms / 1000, tz=timezone.utc) - slack
