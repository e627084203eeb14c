"""How forwarding logs in to Airflow: a password, or managed Airflow's bearer token
(Astronomer's, Cloud Composer's Google tokens, MWAA's) as is, in a file, or printed by a
command. A login yields a token and when to get another: a password's JWT before it ends, a
file when it changes, a command's when it ends or Airflow refuses it (never per delivery);
after a 401 the client asks once for a fresh one, then gives up with the reason."""

from __future__ import annotations

import base64
import json
import math
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import requests

from fivetran_events import ConfigurationError, Settings
from fivetran_events.http import quoted

from .exceptions import AirflowLoginUnavailable, AirflowRejected

#: Renew a cached JWT this long before Airflow would refuse it.
TOKEN_MARGIN_SECONDS = 60.0
#: The longest a token command may run.
COMMAND_TIMEOUT_SECONDS = 60.0
#: What each way of logging in is called in messages.
TOKEN = "FIVETRAN_EVENTS_AIRFLOW_TOKEN"  # noqa: S105 (a variable's name)
TOKEN_FILE, TOKEN_COMMAND = f"{TOKEN}_FILE", f"{TOKEN}_COMMAND"

#: ``send(method, path, **kwargs)``: the client's request without authentication.
Send = Callable[..., requests.Response]


def unavailable(method: str, path: str, why: str) -> AirflowLoginUnavailable:
    """No token now, so nothing was sent: the request is tried again later."""
    return AirflowLoginUnavailable(method, path, f"no token for Airflow: {why}", maybe_sent=False)


def renew_after(token: str) -> float:
    """Seconds after getting a JWT to get the next: its life is ``exp - iat`` (both Airflow's
    clock, so a skewed worker still renews in time); an hour for a token without both claims."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        life = float(claims["exp"]) - float(claims["iat"])
    except (IndexError, ValueError, KeyError, TypeError):
        return 3600.0
    if not math.isfinite(life) or life <= 0:
        return 0.0
    return life - min(TOKEN_MARGIN_SECONDS, life / 2)


class Login:
    """Where the bearer token comes from; ``basic``: Airflow 2's basic auth (a password's)."""

    #: Names the login in messages, never its secret.
    describe = "a login"
    basic: tuple[str, str] | None = None

    def token(self, send: Send, method: str, path: str) -> tuple[str, float]:
        """A token and its seconds of use (``math.inf``: until refused or changed) for the
        request ``method path``; else ``AirflowLoginUnavailable`` or ``AirflowRejected``."""
        raise NotImplementedError

    def changed(self) -> bool:
        """Whether the source changed since the last token (a rotated file)."""
        return False


class PasswordLogin(Login):
    """Airflow 3's ``POST /auth/token`` with a username and password (basic auth on 2)."""

    def __init__(self, username: str, password: str) -> None:
        self.username = username
        self.basic = (username, password)
        self.describe = f"user '{username}'"

    def token(self, send: Send, method: str, path: str) -> tuple[str, float]:
        username, password = self.basic or ("", "")
        resp = send("POST", "/auth/token", json={"username": username, "password": password})
        if resp.status_code not in (200, 201):
            why = f"Airflow answered {resp.status_code}: cannot get a token for user "
            why += f"'{username}': {quoted(resp.text or resp.reason)}"
            raise AirflowRejected("POST", "/auth/token", why, resp.status_code)
        try:
            token = str(resp.json()["access_token"])
        except (ValueError, KeyError, TypeError) as exc:
            why = f"unexpected answer to POST /auth/token: {type(exc).__name__}: {exc}"
            raise unavailable(method, path, why) from None
        return token, renew_after(token)


class StaticToken(Login):
    """A token given as it is (an Astronomer API token): used until Airflow refuses it."""

    describe = TOKEN

    def __init__(self, token: str) -> None:
        self._token = token

    def token(self, send: Send, method: str, path: str) -> tuple[str, float]:
        return self._token, math.inf


class TokenFile(Login):
    """A file holding the token, read again whenever it changes (its inode, size or
    modification time): a platform that rotates the token rewrites the file."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.describe = f"{TOKEN_FILE} ({path})"
        self._seen: tuple[int, int, int] | None = None

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def changed(self) -> bool:
        return self._stat() != self._seen

    def token(self, send: Send, method: str, path: str) -> tuple[str, float]:
        seen = self._stat()
        try:
            text = self.path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            why = f"{self.describe}: cannot read it: {exc.strerror}"
            raise unavailable(method, path, why) from None
        if not text:
            raise unavailable(method, path, f"{self.describe} is empty")
        self._seen = seen
        return text.splitlines()[0].strip(), math.inf


class TokenCommand(Login):
    """A command whose standard output is the token (``gcloud auth print-identity-token``),
    run again when the token's own life ends (a JWT's ``exp``; else an hour) or Airflow
    refuses it. Run without a shell: the words of the setting, split as a shell would."""

    def __init__(self, command: str, timeout: float = COMMAND_TIMEOUT_SECONDS) -> None:
        self.argv = shlex.split(command)
        if not self.argv:
            raise ConfigurationError(f"{TOKEN_COMMAND} is empty: give the command to run")
        self.timeout = timeout
        self.describe = f"{TOKEN_COMMAND} ({self.argv[0]})"

    def token(self, send: Send, method: str, path: str) -> tuple[str, float]:
        try:
            done = subprocess.run(  # noqa: S603 (the operator's own setting, no shell)
                self.argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            why = f"{self.describe} did not finish within {self.timeout:g} s"
            raise unavailable(method, path, why) from None
        except OSError as exc:
            raise unavailable(method, path, f"{self.describe} cannot run: {exc.strerror}") from None
        if done.returncode != 0:
            said = quoted(done.stderr) or "(no output)"
            raise unavailable(method, path, f"{self.describe} exited {done.returncode}: {said}")
        lines = done.stdout.strip().splitlines()
        if not lines or not lines[-1].strip():
            raise unavailable(method, path, f"{self.describe} printed no token")
        token = lines[-1].strip()  # a tool may print notices first; the token is last
        return token, renew_after(token)


def login_from_settings(settings: Settings) -> Login:
    """The one login the settings give; ConfigurationError, naming the variables, unless
    exactly one way is set (a user and password, or one of the token settings)."""
    token = settings.airflow_token.get_secret_value() if settings.airflow_token else ""
    password = settings.airflow_password.get_secret_value() if settings.airflow_password else ""
    given = {
        "FIVETRAN_EVENTS_AIRFLOW_USERNAME/_PASSWORD (or _CREDENTIALS_FILE)": bool(
            settings.airflow_username or password or settings.airflow_credentials_file
        ),
        TOKEN: bool(token),
        TOKEN_FILE: bool(settings.airflow_token_file),
        TOKEN_COMMAND: bool((settings.airflow_token_command or "").strip()),
    }
    chosen = [name for name, on in given.items() if on]
    if len(chosen) > 1:
        raise ConfigurationError(
            f"set exactly one way to log in to Airflow, not {len(chosen)}: {', '.join(chosen)}"
        )
    if not chosen:
        raise ConfigurationError(f"set one way to log in to Airflow: {', '.join(given)}")
    if token:
        return StaticToken(token)
    if settings.airflow_token_file:
        return TokenFile(settings.airflow_token_file)
    if settings.airflow_token_command:
        return TokenCommand(settings.airflow_token_command)
    return PasswordLogin(*credentials(settings))


def credentials(settings: Settings) -> tuple[str, str]:
    """Return (username, password) from the settings or the credentials file."""
    if settings.airflow_credentials_file:
        path = Path(settings.airflow_credentials_file)
        where = f"FIVETRAN_EVENTS_AIRFLOW_CREDENTIALS_FILE ({path})"
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigurationError(f"{where}: cannot read it: {exc.strerror}") from None
        if text.startswith("{"):
            try:
                data = json.loads(text)
                return str(data["username"]), str(data["password"])
            except (ValueError, KeyError, TypeError):
                raise ConfigurationError(
                    f"{where}: expected JSON with 'username' and 'password'"
                ) from None
        user, sep, password = text.splitlines()[0].partition(":") if text else ("", "", "")
        if not sep or not user:
            raise ConfigurationError(f"{where}: expected 'username:password' on the first line")
        return user, password
    if not settings.airflow_username or settings.airflow_password is None:
        raise ConfigurationError(
            "set FIVETRAN_EVENTS_AIRFLOW_USERNAME and FIVETRAN_EVENTS_AIRFLOW_PASSWORD, "
            "or FIVETRAN_EVENTS_AIRFLOW_CREDENTIALS_FILE"
        )
    return settings.airflow_username, settings.airflow_password.get_secret_value()
