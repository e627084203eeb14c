"""The Redis ACL of a deployment's two users (``fivetran-events redis acl``, Redis 7+).

- The app's user (web app, workers, CLI) owns the prefix's keys and RQ's, and may run any
  command but Redis's dangerous ones (``FLUSHALL``, ``CONFIG``, ``KEYS``, ``DEBUG``,
  ``SHUTDOWN``, ``ACL``...); ``INFO`` stays: ``/readyz`` and the worker read
  ``maxmemory-policy`` from it.
- Airflow's user (sensor, triggers, asset watcher, "Fivetran syncs" view) reads the history,
  connectors, deliveries' states and table lists through read-only patterns (``%R~``, Redis
  7.0), subscribes to the history's changes, and only ``SET``s the "next sync" targets the
  Astronomer-compatible sensor keeps for its retries (``{p}waitfrom:*``). It cannot write,
  delete or expire a key the app writes, reach RQ's keys, list keys or publish.

Key patterns come from fivetran_events/keys.py, so a new key is not silently outside (or
inside) a user's reach; tests/integration/webhook_app/test_redis_acl.py tries every forbidden write.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .keys import (
    CONNECTOR_SETS,
    ConnectorKeys,
    changes_pattern,
    connectors_key,
    delivery_key,
    sync_deliveries_key,
    tables_key,
    wait_from_key,
)

APP_USER = "fivetran-events"
AIRFLOW_USER = "fivetran-events-airflow"
APP_PASSWORD_VARIABLE = "FIVETRAN_EVENTS_REDIS_APP_PASSWORD"  # noqa: S105 (a name)
AIRFLOW_PASSWORD_VARIABLE = "FIVETRAN_EVENTS_REDIS_AIRFLOW_PASSWORD"  # noqa: S105
#: RQ names its keys and channels ``rq:...`` whatever the queue (keys.queue_name): its
#: registries of workers and queues are shared by every queue of a Redis.
RQ_PATTERN = "rq:*"
#: A password is as guessable as a webhook secret (settings.MIN_SECRET_BYTES).
MIN_PASSWORD_BYTES = 24
#: What ``ACL SETUSER`` takes as a user name here: no spaces, quotes or rule characters.
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
#: The Airflow side's commands beyond the read category: a transaction (the waitfrom
#: key's SET NX + GET), its one write and the history's change notifications.
AIRFLOW_COMMANDS: tuple[str, ...] = ("+multi", "+exec", "+discard", "+set")
AIRFLOW_COMMANDS += ("+subscribe", "+psubscribe", "+unsubscribe", "+punsubscribe")


def glob_escape(text: str) -> str:
    """Escape Redis glob characters, so a prefix such as ``a*`` matches only itself."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


#: A stand-in for a key's variable part (a connector id, a sync id, a hash).
STAR = "\x00"


def _pattern(key: str) -> str:
    """The pattern of the keys named like ``key``: a keys.py function's name given STAR
    for each variable part, escaped, each STAR then made ``*``."""
    return glob_escape(key).replace(STAR, "*")


def airflow_read_patterns(prefix: str) -> list[str]:
    """The keys Airflow's side reads, none of which it may write."""
    history = ConnectorKeys(prefix, STAR)
    return [
        *(_pattern(getattr(history, name)) for name in CONNECTOR_SETS),
        _pattern(connectors_key(prefix)),
        _pattern(sync_deliveries_key(prefix, STAR, STAR)),
        _pattern(delivery_key(prefix, STAR)),
        _pattern(tables_key(prefix, STAR)),
    ]


def airflow_write_patterns(prefix: str) -> list[str]:
    """The keys Airflow's side writes (and reads back): the task's hash ends the name."""
    return [_pattern(wait_from_key(prefix).rsplit(":", 1)[0] + ":" + STAR)]


def app_rules(prefix: str) -> list[str]:
    keys = [f"~{_pattern(prefix)}*", f"~{RQ_PATTERN}"]
    return [*keys, f"&{changes_pattern(prefix)}", f"&{RQ_PATTERN}", "+@all", "-@dangerous", "+info"]


def airflow_rules(prefix: str) -> list[str]:
    return [
        *(f"%R~{p}" for p in airflow_read_patterns(prefix)),
        *(f"~{p}" for p in airflow_write_patterns(prefix)),
        # As the triggers PSUBSCRIBE: Redis compares a pattern with these letter by letter.
        f"&{changes_pattern(prefix)}",
        # Reads, but not the keyspace's listings (SCAN, KEYS, RANDOMKEY, DBSIZE, TYPE...):
        # a read pattern limits the keys a command names, not the names a listing returns.
        *("+@read", "-@keyspace", "+@connection", "-@dangerous"),
        *AIRFLOW_COMMANDS,
    ]


@dataclass(frozen=True)
class AclUser:
    """One user's ``ACL SETUSER`` rules, its password given only as a SHA-256."""

    name: str
    password_sha256: str
    rules: tuple[str, ...]

    def words(self) -> list[str]:
        # reset: a user already there loses whatever rules it had (and other passwords).
        return [self.name, "reset", "on", f"#{self.password_sha256}", *self.rules]

    def command(self) -> str:
        """The ``ACL SETUSER`` line, for ``redis-cli``."""
        return "ACL SETUSER " + " ".join(self.words())

    def acl_file_line(self) -> str:
        """The line of an ACL file (``aclfile``) or of redis.conf (``user ...``)."""
        return "user " + " ".join(self.words())


def check_user_name(name: str) -> str:
    if not USER_NAME.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a usable Redis user name: 1-64 letters, digits, '_', '.', "
            "'@' or '-', starting with a letter or digit"
        )
    return name


def password_sha256(password: str, variable: str) -> str:
    """Return the password's SHA-256 (hex); refuse one under MIN_PASSWORD_BYTES."""
    if (size := len(password.encode())) < MIN_PASSWORD_BYTES:
        raise ValueError(
            f"{variable} is {size} bytes; it must be at least {MIN_PASSWORD_BYTES} "
            "(generate one with: openssl rand -hex 24)"
        )
    return hashlib.sha256(password.encode()).hexdigest()


def users(prefix: str, passwords: tuple[str, str], names: tuple[str, str]) -> list[AclUser]:
    """The app's and Airflow's users (in that order) of the deployment of ``prefix``."""
    if check_user_name(names[0]) == check_user_name(names[1]):
        raise ValueError(f"the two users need different names, not both {names[0]!r}")
    variables = (APP_PASSWORD_VARIABLE, AIRFLOW_PASSWORD_VARIABLE)
    rules = (app_rules(prefix), airflow_rules(prefix))
    return [
        AclUser(name, password_sha256(password, variable), tuple(rule))
        for name, password, variable, rule in zip(names, passwords, variables, rules, strict=True)
    ]
