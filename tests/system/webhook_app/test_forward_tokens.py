"""Managed Airflow's logins against a real Airflow 3 that forwarding knows only by a token.

Each test gets a JWT from ``POST /auth/token`` itself, as a platform would hand one out,
and gives forwarding the token alone (as it is, in a file, or printed by a command): the
worker never sees the password. Airflow lives for the session; every wait is bounded.
"""

from __future__ import annotations

import shlex
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

from fivetran_events import Settings
from fivetran_events.deliveries import Delivery, DeliveryState
from fivetran_events.keys import delivery_id
from testkit.airflow_harness import AirflowServer
from testkit.forward_support import forwarder, post_event, present_token, run_worker
from testkit.processes import poll_until
from webhook_app.forwarding.forwarder import Forwarder

from .forwarding import events_of, uri

pytestmark = pytest.mark.timeout(480)

CID = "e2e"

#: A token command as a platform's CLI behaves: prints the current token of ``tokens``
#: (one per run, the last again once they run out), counts its runs, and fails while a
#: ``fail`` file exists.
COMMAND = """\
import pathlib, sys
folder = pathlib.Path(sys.argv[1])
runs = folder / "runs"
n = len(runs.read_text().splitlines()) if runs.exists() else 0
runs.write_text("run\\n" * (n + 1))
if (folder / "fail").exists():
    print("ERROR: (gcloud.auth) You do not currently have an active account", file=sys.stderr)
    sys.exit(2)
tokens = (folder / "tokens").read_text().split()
print("notice: printed by a login tool before the token")
print(tokens[min(n, len(tokens) - 1)])
"""


def fresh_jwt(airflow3: AirflowServer) -> str:
    """A JWT as the platform hands it out: the test logs in itself."""
    resp = requests.post(
        f"{airflow3.url}/auth/token",
        json={"username": airflow3.username, "password": airflow3.password},
        timeout=60,  # a busy machine's Airflow answers slowly, not wrongly
    )
    assert resp.status_code in (200, 201), resp.text
    return str(resp.json()["access_token"])


def expired_jwt(airflow3: AirflowServer, ago: int = 60) -> str:
    """A token Airflow issued, re-signed with ``exp`` in the past (as the harness's
    ``expired_token``, with this module's patient login)."""
    import jwt

    real = fresh_jwt(airflow3)
    header = jwt.get_unverified_header(real)
    claims = jwt.decode(real, options={"verify_signature": False})
    claims["exp"] = int(time.time()) - ago
    claims["iat"] = claims["nbf"] = int(time.time()) - 3600
    extra = {k: v for k, v in header.items() if k not in ("alg", "typ")}
    return jwt.encode(claims, airflow3.jwt_secret, algorithm=header["alg"], headers=extra)


def token_forwarder(af_settings: Settings, airflow3: AirflowServer, **login: Any) -> Forwarder:
    """A forwarder whose only login is ``login`` (no username, no password)."""
    fw = forwarder(af_settings, airflow3.url, "", "", **login)
    assert fw.airflow is not None and fw.airflow.login.basic is None
    return fw


def deliver(http: Any, fw: Forwarder, sync_id: str) -> Delivery:
    post_event(http, connector_id=CID, sync_id=sync_id)
    run_worker(fw)
    d = fw.store.get(delivery_id(CID, sync_id, uri(CID)))
    assert d is not None
    return d


def sid() -> str:
    return f"tok-{uuid.uuid4()}"


class TestStaticToken:
    def test_delivered_with_the_token_alone(
        self, http: Any, af_settings: Settings, airflow3: AirflowServer
    ) -> None:
        airflow3.wait_for_asset(uri(CID))
        fw = token_forwarder(af_settings, airflow3, airflow_token=fresh_jwt(airflow3))
        s = sid()
        d = deliver(http, fw, s)
        assert d.state is DeliveryState.DELIVERED, d.fields
        assert [e["id"] for e in events_of(airflow3, CID, s)] == [int(d.fields["event_id"])]

    def test_a_refused_token_is_given_up_at_once(
        self, http: Any, af_settings: Settings, airflow3: AirflowServer
    ) -> None:
        """A static token has no other: one 401, then failed with the reason, no loop."""
        airflow3.wait_for_asset(uri(CID))
        fw = token_forwarder(af_settings, airflow3, airflow_token=expired_jwt(airflow3))
        s = sid()
        d = deliver(http, fw, s)
        assert d.state is DeliveryState.FAILED, d.fields
        reason = d.fields["reason"]
        assert "Airflow answered 401" in reason and "given up" in reason, reason
        assert "the token from FIVETRAN_EVENTS_AIRFLOW_TOKEN, which has no other" in reason
        assert d.fields["attempts"] == "1"
        assert events_of(airflow3, CID, s) == []


class TestTokenFile:
    def test_a_rotation_between_two_deliveries_is_read(
        self, http: Any, af_settings: Settings, airflow3: AirflowServer, tmp_path: Path
    ) -> None:
        """The file is read again when it changes: a rotation to a refused token fails the
        next delivery (it was read, not the old token kept), a rotation to a good one
        delivers the one after."""
        airflow3.wait_for_asset(uri(CID))
        path = tmp_path / "airflow-token"
        first = fresh_jwt(airflow3)
        path.write_text(first + "\n")
        fw = token_forwarder(af_settings, airflow3, airflow_token_file=str(path))
        assert fw.airflow is not None
        assert deliver(http, fw, sid()).state is DeliveryState.DELIVERED
        assert fw.airflow.tokens_fetched == 1

        rotate(path, expired_jwt(airflow3))
        refused = deliver(http, fw, sid())
        assert refused.state is DeliveryState.FAILED, refused.fields
        assert "TOKEN_FILE" in refused.fields["reason"]
        assert "given up" in refused.fields["reason"]

        second = fresh_jwt(airflow3)
        assert second != first
        rotate(path, second)
        s = sid()
        assert deliver(http, fw, s).state is DeliveryState.DELIVERED
        assert fw.airflow._token == second
        assert len(events_of(airflow3, CID, s)) == 1


def rotate(path: Path, token: str) -> None:
    """Replace the file as a rotating sidecar does (write beside it, rename over it)."""
    new = path.with_suffix(".new")
    new.write_text(token + "\n")
    new.replace(path)


class TestTokenCommand:
    def command(self, folder: Path, *tokens: str) -> str:
        script = folder / "print_token.py"
        script.write_text(COMMAND)
        (folder / "tokens").write_text("\n".join(tokens) + "\n")
        return shlex.join([sys.executable, str(script), str(folder)])

    def runs(self, folder: Path) -> int:
        runs = folder / "runs"
        return len(runs.read_text().splitlines()) if runs.exists() else 0

    def test_run_once_for_many_deliveries_and_again_after_a_401(
        self, http: Any, af_settings: Settings, airflow3: AirflowServer, tmp_path: Path
    ) -> None:
        airflow3.wait_for_asset(uri(CID))
        command = self.command(tmp_path, fresh_jwt(airflow3))
        fw = token_forwarder(af_settings, airflow3, airflow_token_command=command)
        assert fw.airflow is not None
        for _ in range(2):
            assert deliver(http, fw, sid()).state is DeliveryState.DELIVERED
        assert self.runs(tmp_path) == 1  # not per delivery

        # The platform's token ended early (revoked): Airflow answers 401, the command runs
        # again and its new token delivers.
        (tmp_path / "tokens").write_text(fresh_jwt(airflow3) + "\n")
        present_token(fw.airflow, expired_jwt(airflow3))
        s = sid()
        assert deliver(http, fw, s).state is DeliveryState.DELIVERED
        assert self.runs(tmp_path) == 2
        assert len(events_of(airflow3, CID, s)) == 1

    def test_a_failing_command_is_a_retry_that_sent_nothing(
        self, http: Any, af_settings: Settings, airflow3: AirflowServer, tmp_path: Path
    ) -> None:
        """No token, no POST: retried with the command's exit code and error as the
        reason; once the command works again the delivery goes through."""
        airflow3.wait_for_asset(uri(CID))
        command = self.command(tmp_path, fresh_jwt(airflow3))
        (tmp_path / "fail").write_text("")
        fw = token_forwarder(
            af_settings, airflow3, airflow_token_command=command, forward_backoff_max_seconds=1
        )
        s = sid()
        d = deliver(http, fw, s)
        assert d.state is DeliveryState.RETRYING, d.fields
        reason = d.fields["reason"]
        assert "FIVETRAN_EVENTS_AIRFLOW_TOKEN_COMMAND" in reason and "exited 2" in reason, reason
        assert "do not currently have an active account" in reason, reason
        assert events_of(airflow3, CID, s) == []

        (tmp_path / "fail").unlink()

        def delivered() -> bool:
            run_worker(fw)
            got = fw.store.get(d.id)
            return got is not None and got.state is DeliveryState.DELIVERED

        poll_until(delivered, "the retried delivery", 30, 0.5)
        assert len(events_of(airflow3, CID, s)) == 1

    def test_a_fresh_token_refused_too_is_given_up_not_looped(
        self, http: Any, af_settings: Settings, airflow3: AirflowServer, tmp_path: Path
    ) -> None:
        """The command's token is refused, and so is the fresh one it prints next: failed
        with the reason after two runs, not a loop of runs and POSTs."""
        airflow3.wait_for_asset(uri(CID))
        # Two different tokens Airflow refuses with 401 (a forged one is a 403: rejected too).
        command = self.command(tmp_path, expired_jwt(airflow3), expired_jwt(airflow3, ago=120))
        fw = token_forwarder(af_settings, airflow3, airflow_token_command=command)
        s = sid()
        d = deliver(http, fw, s)
        assert d.state is DeliveryState.FAILED, d.fields
        reason = d.fields["reason"]
        assert "token from FIVETRAN_EVENTS_AIRFLOW_TOKEN_COMMAND" in reason, reason
        assert "and again to a fresh one" in reason, reason
        assert "given up" in reason
        assert self.runs(tmp_path) == 2
        assert events_of(airflow3, CID, s) == []
