"""Every ``FIVETRAN_EVENTS_*`` setting, with its default and check (docs/configuration.md)."""

from __future__ import annotations

import functools
import json
import os
import string
from typing import Annotated, Literal, TypeVar
from urllib.parse import urlsplit

import redis
from pydantic import Field, SecretStr, StringConstraints, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .exceptions import ConfigurationError
from .keys import DEFAULT_PREFIX, queue_name
from .redis_url import check_url, client_from_url

DAY_S = 86_400
ENV_PREFIX = "FIVETRAN_EVENTS_"
#: Dataset URI of a connector without a mapping entry (``fivetran_events.uris``).
DEFAULT_URI_TEMPLATE = "fivetran://connector/{connector_id}"
DEFAULT_FIVETRAN_API_URL = "https://api.fivetran.com"
FIELDS = ("connector_id", "connector_name", "connector_type", "group_id")


TABLE_TEMPLATE_FIELDS = ("connector_id", "group_id", "service", "schema", "table", "uri")


def check_table_template(template: str) -> str:
    try:
        template.format(**dict.fromkeys(TABLE_TEMPLATE_FIELDS, "x"))
    except (KeyError, IndexError, ValueError) as exc:
        fields = ", ".join("{" + f + "}" for f in TABLE_TEMPLATE_FIELDS)
        raise ValueError(
            f"{template!r} is not a table URI template ({exc}); use {fields}"
        ) from None
    return template


def check_template(template: str) -> str:
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise ValueError(f"invalid URI template {template!r}: {exc}") from None
    unknown = sorted(set(names) - set(FIELDS))
    if unknown:
        known = ", ".join("{" + f + "}" for f in FIELDS)
        raise ValueError(f"URI template {template!r} uses {unknown}; it may use {known}")
    if "://" not in template:
        raise ValueError(f"URI template {template!r} must be a URI (scheme://...)")
    return template


def check_api_url(url: str, example: str = DEFAULT_FIVETRAN_API_URL) -> str:
    """Return a base URL (Fivetran's API by default) without a trailing ``/``; raise ValueError
    if unusable, or carrying a user or password (a message naming the URL would too)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL, e.g. {example}")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry a user or password")
    if parts.query or parts.fragment:
        raise ValueError("must be a base URL without ?query or #fragment")
    return url.strip().rstrip("/")


#: Secrets read by ``_secret_list``, not stripped: a JSON list's may hold outer spaces.
SecretList = Annotated[list[Annotated[str, StringConstraints(strip_whitespace=False)]], NoDecode]


def _secret_list(text: str) -> list[str]:
    """Read secrets or tokens from a variable's or secret file's text: a JSON list (each as
    given), one a line when several (each stripped, like a whole file), else comma-separated."""
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            items = None
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError('starts with "[" but is not a JSON list of strings, e.g. ["a,b", "c"]')
        return [i for i in items if i]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1:
        return lines
    return [part.strip() for part in text.split(",") if part.strip()]


#: The shortest webhook secret or API token accepted (``openssl rand -hex 24`` gives 48).
MIN_SECRET_BYTES = 24


def check_secret_length(values: list[str], what: str) -> list[str]:
    """Return ``values``; raise ValueError naming the first too short (never its text)."""
    for number, value in enumerate(values, 1):
        size = len(value.encode())
        if size < MIN_SECRET_BYTES:
            raise ValueError(
                f"{what} number {number} is {size} bytes; each must be at least "
                f"{MIN_SECRET_BYTES} (generate one with: openssl rand -hex 24)"
            )
    return values


class HistoryDefaults(BaseSettings):
    """The settings the Airflow side shares with the server: a model of their own, so a
    webhook-only variable the Airflow side never reads cannot fail a sensor."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        str_strip_whitespace=True,
        validate_default=True,
    )

    #: Prefix of every Redis key (several deployments may share a Redis).
    key_prefix: str = DEFAULT_PREFIX
    #: A running sync older than this many hours is taken as lost (its sync_end never came).
    max_sync_duration_hours: float = Field(default=24.0, gt=0)
    #: What a successful sync updates: the connector's asset, its tables' (docs/tables.md), or both.
    asset_granularity: Literal["connector", "table", "both"] = "connector"
    #: Partitioned asset events (Airflow 3.2+, docs/partitions.md): besides the plain event,
    #: one per hour or day a success completed (the view's periods too); unset: none.
    partition_grain: Literal["hour", "day"] | None = None
    #: Seconds past a connector's schedule before it is overdue (fivetran_events.freshness);
    #: unset: the larger of 15 minutes and a quarter of its sync frequency.
    overdue_grace_seconds: float | None = Field(default=None, ge=0)
    #: TOML, YAML or JSON of connector ids -> objective seconds, over Fivetran's schedule.
    freshness_objectives_file: str | None = None

    @field_validator("partition_grain", "overdue_grace_seconds", mode="before")
    @classmethod
    def _no_grain(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("key_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value or any(ch.isspace() for ch in value):
            raise ValueError("must be a non-empty prefix without spaces, e.g. 'fte:'")
        return value

    @property
    def max_sync_duration_ms(self) -> int:
        return int(self.max_sync_duration_hours * 3600 * 1000)


class LogSettings(BaseSettings):
    """How the server, the worker and the CLI log: read before anything else, so a bad
    setting elsewhere is reported in the chosen format."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", str_strip_whitespace=True
    )

    #: ``json``, ``console`` or ``auto``: JSON unless stderr is a terminal.
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"

    @field_validator("log_format", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value


class Settings(HistoryDefaults):
    """Every setting, from ``FIVETRAN_EVENTS_*`` environment variables."""

    #: redis://, rediss://, unix:// or redis+sentinel:// (fivetran_events.redis_url).
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: Replicas that must confirm a delivery (Redis WAIT) before the 2xx, else a 503 (retried).
    redis_wait_replicas: int = Field(default=0, ge=0, le=64)
    #: WAIT's timeout (0 would wait forever).
    redis_wait_timeout_ms: int = Field(default=500, ge=1, le=60_000)
    #: Webhook secrets; several are valid at once during a rotation (_secret_list).
    webhook_secrets: SecretList = Field(default_factory=list)
    #: Bearer tokens accepted on /api/*; none configured means /api/* is closed.
    api_tokens: SecretList = Field(default_factory=list)
    #: Days of history kept; backfills reach back a year or more.
    retention_days: float = Field(default=800.0, gt=0)
    #: Fivetran's bodies are well under 4 KiB.
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    #: The Retry-After Fivetran is sent when Redis is unreachable.
    retry_after_seconds: int = Field(default=30, ge=1)
    redis_timeout_seconds: float = Field(default=5.0, gt=0)
    #: Further ahead of the clock is a 400: a success from the future counts for every target.
    max_clock_skew_seconds: float = Field(default=3600.0, ge=0)

    # --- Forwarding to Airflow ---------------------------------------------------------
    #: Airflow's API server (e.g. http://127.0.0.1:8080); unset: no forwarding.
    airflow_url: str | None = None
    #: Airflow 3 exchanges them for a JWT; Airflow 2 takes them as basic auth.
    airflow_username: str | None = None
    airflow_password: SecretStr | None = None
    #: ``username:password`` (or JSON with both): the password stays out of the environment.
    airflow_credentials_file: str | None = None
    #: Instead of a login, a bearer token (managed Airflow's): as is, in a file read again when
    #: it changes, or printed by a command run again on expiry or refusal (airflow_auth.py).
    airflow_token: SecretStr | None = None
    airflow_token_file: str | None = None
    airflow_token_command: str | None = None
    #: 3 (/api/v2, JWT), 2 (/api/v1, basic auth) or auto (ask).
    airflow_api_version: Literal["auto", "2", "3"] = "auto"
    airflow_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    airflow_verify_tls: bool = True
    #: A private CA bundle for Airflow's certificate (implies verification).
    airflow_ca_bundle: str | None = None
    dataset_uri_template: str = DEFAULT_URI_TEMPLATE
    #: TOML, YAML or JSON mapping connector ids to dataset URIs (fivetran_events.uris).
    dataset_mapping_file: str | None = None
    #: A table's asset URI instead of its destination's naming (destinations.py).
    table_uri_template: str | None = None
    #: When a success completes a period: the sensor's criterion (decision.Criterion).
    partition_criterion: Literal["ended_after", "started_after"] = "ended_after"
    #: The most keys one sync posts (unset: 31 days'); ``replay --partitions`` posts the rest.
    partition_max_keys: int | None = Field(default=None, ge=1, le=100_000)
    #: Hours a table list is used before it is read again (sooner after a schema change).
    tables_refresh_hours: float = Field(default=24.0, gt=0, le=24 * 30)
    #: Hours a delivery is retried: past Fivetran's 24 h of retries, so we outlast its outages.
    forward_retry_hours: float = Field(default=48.0, gt=0)
    #: Doubles each attempt, with jitter, up to the maximum.
    forward_backoff_seconds: float = Field(default=1.0, gt=0)
    forward_backoff_max_seconds: float = Field(default=300.0, gt=0)
    #: Caps Airflow's Retry-After: ``1e22`` or year 9999 must not park a delivery.
    max_retry_after_seconds: float = Field(default=3600.0, ge=0, le=7 * DAY_S)
    #: How long an attempt holds a delivery before another worker takes it over.
    forward_lease_seconds: float = Field(default=60.0, ge=5)
    #: How long Airflow may still commit a POST the worker gave up on: no second POST
    #: before a lookup after that finds nothing. Airflow's ``[api] worker_timeout``.
    forward_unknown_outcome_seconds: float = Field(default=120.0, ge=0, le=86_400)
    #: Hours a delivered record stays: longer than Fivetran's 24 h of retries, so a late
    #: redelivery still finds it (undelivered ones: the retry window plus this).
    forward_keep_delivered_hours: float = Field(default=72.0, gt=0)

    # --- OpenLineage (webhook_app/forwarding/enqueue.py, forwarding/lineage.py) --------
    #: Send every sync as an OpenLineage run; ``auto``: when its client finds a transport.
    lineage: Literal["auto", "on", "off"] = "auto"
    #: The job namespace of a connector's runs (the job's name is the connector id).
    lineage_namespace: str = "fivetran://{group_id}"
    #: This server's public base URL (Fivetran posts to its /webhooks/fivetran): the
    #: facet's ``_schemaURL`` is the schema it serves there; unset: the schema's urn.
    public_url: str | None = None

    # --- Fivetran's REST API (fivetran_events.fivetran_api) ---------------------------
    fivetran_api_key: SecretStr | None = None
    fivetran_api_secret: SecretStr | None = None
    fivetran_api_url: str = DEFAULT_FIVETRAN_API_URL
    #: Minutes between the worker's reconciles (reconcile.py), with an API key; 0: none.
    reconcile_minutes: float = Field(default=15.0, ge=0, le=1440)

    # --- The worker ---------------------------------------------------------------------
    #: The worker's metrics address: 0.0.0.0 (or the pod's) for a Prometheus on another host.
    metrics_host: str = Field(default="127.0.0.1", min_length=1, pattern=r"^[^\s/]+$")

    @field_validator("dataset_uri_template")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_template(value)

    @field_validator("lineage_namespace")
    @classmethod
    def _lineage_namespace(cls, value: str) -> str:
        try:
            value.format(connector_id="c", group_id="g")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"only {{group_id}} and {{connector_id}} may be filled in ({exc})"
            ) from None
        return value

    @field_validator("partition_max_keys", mode="before")
    @classmethod
    def _unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("table_uri_template")
    @classmethod
    def _table_template(cls, value: str | None) -> str | None:
        if not value:
            return None
        return check_table_template(value)

    @field_validator("airflow_url")
    @classmethod
    def _airflow_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL, e.g. http://127.0.0.1:8080")
        return value.rstrip("/")

    @field_validator("fivetran_api_url")
    @classmethod
    def _fivetran_url(cls, value: str) -> str:
        return check_api_url(value)

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        return check_api_url(value, "https://events.example.com") if value else None

    @field_validator(
        "airflow_password",
        "airflow_token",
        "fivetran_api_key",
        "fivetran_api_secret",
        mode="before",
    )
    @classmethod
    def _strip_secret(cls, value: object) -> object:
        # A secret file ends with a newline: never part of it.
        return value.strip() if isinstance(value, str) else value

    @field_validator("webhook_secrets", "api_tokens", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _secret_list(value) if isinstance(value, str) else value

    @field_validator("webhook_secrets")
    @classmethod
    def _long_secrets(cls, value: list[str]) -> list[str]:
        return check_secret_length(value, "secret")

    @field_validator("api_tokens")
    @classmethod
    def _long_tokens(cls, value: list[str]) -> list[str]:
        return check_secret_length(value, "token")

    @field_validator("redis_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)

    @property
    def queue_name(self) -> str:
        """RQ's queue of this deployment's jobs, named for its key prefix (keys.py)."""
        return queue_name(self.key_prefix)

    @property
    def retention_ms(self) -> int:
        return int(self.retention_days * DAY_S * 1000)

    @property
    def max_clock_skew_ms(self) -> int:
        return int(self.max_clock_skew_seconds * 1000)

    def redis_client(self) -> redis.Redis:
        """Return a client for ``redis_url`` whose commands time out (every process builds
        its client here, so a stuck Redis costs at most the timeout everywhere alike)."""
        return client_from_url(
            self.redis_url,
            socket_timeout=self.redis_timeout_seconds,
            socket_connect_timeout=self.redis_timeout_seconds,
        )


#: A folder of secret files named like the variables (lower case); the environment wins.
SECRETS_DIR_VARIABLE = "FIVETRAN_EVENTS_SECRETS_DIR"
#: systemd's ``LoadCredential=`` folder, read when FIVETRAN_EVENTS_SECRETS_DIR is unset.
SYSTEMD_CREDENTIALS_VARIABLE = "CREDENTIALS_DIRECTORY"


S = TypeVar("S", bound=BaseSettings)


def load_settings(**overrides: object) -> Settings:
    """Read settings; raise ConfigurationError naming the bad variable."""
    return _load(Settings, **overrides)


def log_settings() -> LogSettings:
    return _load(LogSettings)


def history_defaults() -> HistoryDefaults:
    """The Airflow side's defaults, read once per process and environment (every hook asks)."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)))
    if not env:
        # The usual Airflow worker: the defaults, without building a settings model.
        return _HISTORY_DEFAULTS
    return _history_defaults_for(env)


_HISTORY_DEFAULTS = HistoryDefaults.model_construct()


@functools.lru_cache(maxsize=4)
def _history_defaults_for(env: tuple[tuple[str, str], ...]) -> HistoryDefaults:
    # ``env`` is only the cache key; an error is not cached.
    return _load(HistoryDefaults)


def secrets_dir() -> str | None:
    """The folder of secret files (FIVETRAN_EVENTS_SECRETS_DIR, else systemd's), or None."""
    variable = SECRETS_DIR_VARIABLE
    if not os.environ.get(variable) and os.environ.get(SYSTEMD_CREDENTIALS_VARIABLE):
        variable = SYSTEMD_CREDENTIALS_VARIABLE
    if (folder := os.environ.get(variable)) and not os.path.isdir(folder):
        raise ConfigurationError(f"{variable}: {folder} is not a folder")
    return folder or None


def _load(model: type[S], **overrides: object) -> S:
    folder = secrets_dir()
    try:
        return model(_secrets_dir=folder, **overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ENV_PREFIX + str(err["loc"][0]).upper() if err["loc"] else "settings"
        raise ConfigurationError(f"{name}: {err['msg']}") from None
