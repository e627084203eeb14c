"""Settings shared by the webhook server, the workers, the CLI and the Airflow side.

Every setting comes from an environment variable prefixed ``FIVETRAN_EVENTS_``; the
defaults live here, each with a line saying what it is.
"""

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
from .keys import DEFAULT_PREFIX
from .redis_url import check_url, client_from_url

DAY_S = 86_400
#: Every setting's environment variable starts with this.
ENV_PREFIX = "FIVETRAN_EVENTS_"
#: Dataset URI of a connector without a mapping entry (``fivetran_events.uris``).
DEFAULT_URI_TEMPLATE = "fivetran://connector/{connector_id}"
#: Fivetran's REST API.
DEFAULT_FIVETRAN_API_URL = "https://api.fivetran.com"
#: The placeholders a URI template may use.
FIELDS = ("connector_id", "connector_name", "connector_type", "group_id")


TABLE_TEMPLATE_FIELDS = ("connector_id", "group_id", "service", "schema", "table", "uri")


def check_table_template(template: str) -> str:
    """Return ``template`` if it renders with a table's fields; raise ValueError if not."""
    try:
        template.format(**dict.fromkeys(TABLE_TEMPLATE_FIELDS, "x"))
    except (KeyError, IndexError, ValueError) as exc:
        fields = ", ".join("{" + f + "}" for f in TABLE_TEMPLATE_FIELDS)
        raise ValueError(
            f"{template!r} is not a table URI template ({exc}); use {fields}"
        ) from None
    return template


def check_template(template: str) -> str:
    """Return ``template`` if it names only known placeholders; raise ValueError if not."""
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


def check_api_url(url: str) -> str:
    """Return Fivetran's API base URL without a trailing ``/``; raise ValueError if unusable.

    No user or password in it: the key and secret go in their own settings, so that no
    error message or log line that names the URL can carry them.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL, e.g. https://api.fivetran.com")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry a user or password: set the key and secret instead")
    if parts.query or parts.fragment:
        raise ValueError("must be a base URL without ?query or #fragment")
    return url.strip().rstrip("/")


#: A list of secrets read by ``_secret_list``: the model's whitespace stripping does not
#: apply to the items, so a JSON list's secret may begin or end with a space.
SecretList = Annotated[list[Annotated[str, StringConstraints(strip_whitespace=False)]], NoDecode]


def _secret_list(text: str) -> list[str]:
    """Read secrets or tokens from a variable's (or a secret file's) text.

    Three forms, so that a secret can hold any character:

    - a JSON list of strings, ``["a,b", "c"]``: each exactly as given (the text starts
      with ``[``);
    - one secret a line when there are several lines (a secret file): blank lines are
      skipped and each line stripped, spaces inside a secret kept. Stripped rather than
      kept as typed because pydantic-settings strips a secret file's text as a whole:
      keeping a line's own spaces would hold for the middle lines only;
    - otherwise comma-separated, each part stripped, as before.
    """
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


class HistoryDefaults(BaseSettings):
    """The settings the Airflow side shares with the server: key prefix, sync staleness,
    and what a sync updates (the DAG factory schedules on it).

    A model of their own so that a task process validates these variables, not every
    setting (a millisecond of each sensor task's duration, and a webhook-only variable the
    Airflow side never reads cannot fail a sensor).
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        str_strip_whitespace=True,
        validate_default=True,
    )

    #: Prefix of every Redis key this project writes (several deployments may share a Redis).
    key_prefix: str = DEFAULT_PREFIX
    #: A running sync older than this many hours is taken as lost (its sync_end never came).
    max_sync_duration_hours: float = Field(default=24.0, gt=0)
    #: What a successful sync updates: the connector's asset (``connector``),
    #: one asset per enabled destination table (``table``), or both (docs/tables.md).
    asset_granularity: Literal["connector", "table", "both"] = "connector"

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
    """How the server, the worker and the CLI log (webhook_app/logs.py).

    A model of its own, read before anything else: a bad setting elsewhere is then
    reported in the chosen format instead of stopping the logging that would report it.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", str_strip_whitespace=True
    )

    #: ``json`` (one object a line), ``console`` (text) or ``auto``: JSON unless stderr is
    #: a terminal.
    log_format: Literal["auto", "json", "console"] = "auto"
    #: The level of the server's, the worker's and the CLI's logs.
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
    """Configuration from ``FIVETRAN_EVENTS_*`` environment variables."""

    #: Where the history and the job queue live: redis://, rediss://, unix:// or, behind
    #: Redis Sentinel, redis+sentinel://[:password@]host1:26379,host2:26379/service[/db]
    #: (fivetran_events.redis_url).
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: After a delivery is recorded, wait until this many replicas confirm it before
    #: answering 2xx (Redis WAIT); 0: do not wait. Fewer in time: 503, Fivetran retries.
    redis_wait_replicas: int = Field(default=0, ge=0, le=64)
    #: How long that wait may take, in milliseconds (WAIT's timeout; 0 would wait forever).
    redis_wait_timeout_ms: int = Field(default=500, ge=1, le=60_000)
    #: Webhook secrets; several are valid at once during a rotation. Comma-separated,
    #: one a line (a secret file), or a JSON list (any character), see _secret_list.
    webhook_secrets: SecretList = Field(default_factory=list)
    #: Bearer tokens accepted on /api/*, read as the secrets are; none configured means
    #: /api/* is closed.
    api_tokens: SecretList = Field(default_factory=list)
    #: How long history is kept, in days; backfills reach back a year or more.
    retention_days: float = Field(default=800.0, gt=0)
    #: Largest webhook body accepted, in bytes (Fivetran's are well under 4 KiB).
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    #: Name of the RQ queue that forwarding jobs go to.
    queue_name: str = "fivetran-events"
    #: Seconds Fivetran is asked to wait (Retry-After) when Redis is unreachable.
    retry_after_seconds: int = Field(default=30, ge=1)
    #: Seconds a Redis command may take before the webhook answers 503.
    redis_timeout_seconds: float = Field(default=5.0, gt=0)
    #: How far ahead of the server's clock an event's ``created`` may be, in seconds;
    #: further is refused with 400 (a success from the future would count for every target).
    max_clock_skew_seconds: float = Field(default=3600.0, ge=0)

    # --- Forwarding to Airflow ---------------------------------------------------------
    #: Base URL of Airflow's API server (e.g. http://127.0.0.1:8080); unset: no forwarding.
    airflow_url: str | None = None
    #: Airflow user the worker posts as (Airflow 3: exchanged for a JWT; Airflow 2: basic auth).
    airflow_username: str | None = None
    #: That user's password.
    airflow_password: SecretStr | None = None
    #: A file holding ``username:password`` on its first line (or JSON with both), instead
    #: of the two variables above, so the password stays out of the environment.
    airflow_credentials_file: str | None = None
    #: Which REST API to speak: 3 (/api/v2, JWT), 2 (/api/v1, basic auth) or auto (ask).
    airflow_api_version: Literal["auto", "2", "3"] = "auto"
    #: Seconds one HTTP request to Airflow may take (connect and read each).
    airflow_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    #: Verify Airflow's TLS certificate; set a path to trust a private CA bundle instead.
    airflow_verify_tls: bool = True
    #: CA bundle for Airflow's certificate (implies verification).
    airflow_ca_bundle: str | None = None
    #: Dataset URI of a connector without a mapping entry (see fivetran_events.uris).
    dataset_uri_template: str = DEFAULT_URI_TEMPLATE
    #: TOML or YAML file mapping connector ids to one or more dataset URIs.
    dataset_mapping_file: str | None = None
    #: A table's asset URI instead of its destination's naming (destinations.py), from
    #: ``{connector_id}``, ``{group_id}``, ``{service}``, ``{schema}``, ``{table}``, ``{uri}``.
    table_uri_template: str | None = None
    #: Hours a connector's table list is used before it is read from Fivetran again
    #: (sooner after an edit_connector, resync_table or schema change).
    tables_refresh_hours: float = Field(default=24.0, gt=0, le=24 * 30)
    #: How long a delivery is retried before it is given up as undelivered, in hours;
    #: longer than Fivetran's own 24 h of retries, so an outage it survives we survive.
    forward_retry_hours: float = Field(default=48.0, gt=0)
    #: First retry delay in seconds; doubles each attempt, with jitter, up to the maximum.
    forward_backoff_seconds: float = Field(default=1.0, gt=0)
    #: Largest delay between two attempts, in seconds (a Retry-After may ask for more).
    forward_backoff_max_seconds: float = Field(default=300.0, gt=0)
    #: The longest wait a Retry-After from Airflow can ask for, in seconds: one answer
    #: of ``1e22`` or a date in year 9999 must not park a delivery for the whole window.
    max_retry_after_seconds: float = Field(default=3600.0, ge=0, le=7 * DAY_S)
    #: Seconds an attempt may hold a delivery before another worker takes it over.
    forward_lease_seconds: float = Field(default=60.0, ge=5)
    #: Seconds Airflow may still commit a POST after the worker gave up on it (a timeout,
    #: a reset after sending); no second POST before a lookup made after that finds
    #: nothing. Default: Airflow's own ``[api] worker_timeout`` (120 s).
    forward_unknown_outcome_seconds: float = Field(default=120.0, ge=0, le=86_400)
    #: Hours a delivered delivery's record (and its listing entries) stays after Airflow
    #: took the event; longer than Fivetran's 24 h of retries, so a late redelivery still
    #: finds it. Records not delivered stay the retry window plus this long.
    forward_keep_delivered_hours: float = Field(default=72.0, gt=0)

    # --- OpenLineage (webhook_app/lineage.py) ------------------------------------------
    #: Send every sync as an OpenLineage run: ``auto`` (on when the OpenLineage client
    #: finds a transport: OPENLINEAGE_URL, OPENLINEAGE_CONFIG, OPENLINEAGE__TRANSPORT__*
    #: or an openlineage.yml), ``on`` or ``off``. The client reads its own configuration.
    lineage: Literal["auto", "on", "off"] = "auto"
    #: The OpenLineage job namespace of a connector's runs; {group_id} and {connector_id}
    #: are filled in. The job's name is the connector id.
    lineage_namespace: str = "fivetran://{group_id}"

    # --- Fivetran's REST API (fivetran_events.fivetran_api) ---------------------------
    #: The API key of a Fivetran user or system key (REST API: Basic auth's user name).
    fivetran_api_key: SecretStr | None = None
    #: Its secret (Basic auth's password).
    fivetran_api_secret: SecretStr | None = None
    #: Base URL of Fivetran's REST API; another one points the client at a stand-in.
    fivetran_api_url: str = DEFAULT_FIVETRAN_API_URL
    #: Minutes between the worker's reconciles against Fivetran's connection list
    #: (fivetran_events/reconcile.py); only when an API key is set. 0 turns them off.
    reconcile_minutes: float = Field(default=15.0, ge=0, le=1440)

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

    @field_validator("airflow_password", "fivetran_api_key", "fivetran_api_secret", mode="before")
    @classmethod
    def _strip_secret(cls, value: object) -> object:
        # A secret file ends with a newline (echo, openssl rand > file): never part of it.
        return value.strip() if isinstance(value, str) else value

    @field_validator("webhook_secrets", "api_tokens", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _secret_list(value) if isinstance(value, str) else value

    @field_validator("redis_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)

    @property
    def retention_ms(self) -> int:
        return int(self.retention_days * DAY_S * 1000)

    @property
    def max_clock_skew_ms(self) -> int:
        return int(self.max_clock_skew_seconds * 1000)

    def redis_client(self) -> redis.Redis:
        """Return a client for ``redis_url`` whose commands time out (the one factory).

        Every process (web, worker, CLI) builds its client here, so a stuck Redis costs
        at most ``redis_timeout_seconds`` per command everywhere alike; behind Sentinel
        it is a client of the current primary, found again after a failover.
        """
        return client_from_url(
            self.redis_url,
            socket_timeout=self.redis_timeout_seconds,
            socket_connect_timeout=self.redis_timeout_seconds,
        )


#: A folder of secret files (Docker/Compose secrets, systemd credentials): a file named
#: like a variable, e.g. ``fivetran_events_webhook_secrets``, gives that setting's value.
#: The environment wins over a file.
SECRETS_DIR_VARIABLE = "FIVETRAN_EVENTS_SECRETS_DIR"


S = TypeVar("S", bound=BaseSettings)


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; raise ConfigurationError naming the bad variable."""
    return _load(Settings, **overrides)


def log_settings() -> LogSettings:
    """Read the logging settings; raise ConfigurationError naming a bad variable."""
    return _load(LogSettings)


def history_defaults() -> HistoryDefaults:
    """Return the Airflow side's defaults, read once per process for a given environment.

    Every hook asks (a triggerer holds hundreds); the cache is keyed on the
    ``FIVETRAN_EVENTS_*`` variables, so a changed environment is read again. Secret
    files are read once per process.
    """
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)))
    if not env:
        # Nothing to read (the usual Airflow worker, whose connection names the prefix):
        # the defaults as they are, without building a settings model (a millisecond or
        # two of a sensor task's fresh process).
        return _HISTORY_DEFAULTS
    return _history_defaults_for(env)


#: What ``HistoryDefaults`` reads from an environment without ``FIVETRAN_EVENTS_*``.
_HISTORY_DEFAULTS = HistoryDefaults.model_construct()


@functools.lru_cache(maxsize=4)
def _history_defaults_for(env: tuple[tuple[str, str], ...]) -> HistoryDefaults:
    # ``env`` is only the cache key: the model reads the same variables itself. A
    # ConfigurationError is not cached, so a corrected variable is read on the next call.
    return _load(HistoryDefaults)


def _load(model: type[S], **overrides: object) -> S:
    secrets_dir = os.environ.get(SECRETS_DIR_VARIABLE) or None
    if secrets_dir is not None and not os.path.isdir(secrets_dir):
        raise ConfigurationError(f"{SECRETS_DIR_VARIABLE}: {secrets_dir} is not a folder")
    try:
        return model(_secrets_dir=secrets_dir, **overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ENV_PREFIX + str(err["loc"][0]).upper() if err["loc"] else "settings"
        raise ConfigurationError(f"{name}: {err['msg']}") from None
