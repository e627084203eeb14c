"""Settings shared by the webhook server, the workers, the CLI and the Airflow side.

Every setting comes from an environment variable prefixed ``FIVETRAN_EVENTS_``; the
defaults live here, each with a line saying what it is.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .exceptions import ConfigurationError
from .keys import DEFAULT_PREFIX

DAY_S = 86_400

CommaList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    """Configuration from ``FIVETRAN_EVENTS_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="FIVETRAN_EVENTS_", extra="ignore",
                                      validate_default=True)

    #: Where the history and the job queue live.
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: Webhook secrets, comma-separated; several are valid at once during a rotation.
    webhook_secrets: CommaList = Field(default_factory=list)
    #: Bearer tokens accepted on /api/*, comma-separated; none configured means /api/* is closed.
    api_tokens: CommaList = Field(default_factory=list)
    #: Prefix of every Redis key this project writes (several deployments may share a Redis).
    key_prefix: str = DEFAULT_PREFIX
    #: How long history is kept, in days; backfills reach back a year or more.
    retention_days: float = Field(default=800.0, gt=0)
    #: A running sync older than this many hours is taken as lost (its sync_end never came).
    max_sync_duration_hours: float = Field(default=24.0, gt=0)
    #: Largest webhook body accepted, in bytes (Fivetran's are well under 4 KiB).
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    #: Name of the RQ queue that forwarding jobs go to.
    queue_name: str = "fivetran-events"
    #: Seconds Fivetran is asked to wait (Retry-After) when Redis is unreachable.
    retry_after_seconds: int = Field(default=30, ge=1)
    #: Seconds a Redis command may take before the webhook answers 503.
    redis_timeout_seconds: float = Field(default=5.0, gt=0)

    @field_validator("webhook_secrets", "api_tokens", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("key_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value or any(ch.isspace() for ch in value):
            raise ValueError("must be a non-empty prefix without spaces, e.g. 'fte:'")
        return value

    @field_validator("redis_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return value

    @property
    def retention_ms(self) -> int:
        return int(self.retention_days * DAY_S * 1000)

    @property
    def max_sync_duration_ms(self) -> int:
        return int(self.max_sync_duration_hours * 3600 * 1000)


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; raise ConfigurationError naming the bad variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        err = exc.errors()[0]
        name = "FIVETRAN_EVENTS_" + str(err["loc"][0]).upper() if err["loc"] else "settings"
        raise ConfigurationError(f"{name}: {err['msg']}") from None
