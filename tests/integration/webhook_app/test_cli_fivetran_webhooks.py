"""``fivetran-events fivetran webhooks create | list | test | update`` against Fivetran's
stand-in.

Real parts: the stand-in (testkit/fivetran_api.py) is an HTTP server on 127.0.0.1 that
POSTs its signed test deliveries, as Fivetran does, to the real webhook app under
gunicorn (testkit.servers.webhook_server) with the suite's Redis; Fivetran creates a
webhook only when that delivery got a 2xx. The commands run through click's runner.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from pytest_redis.executor import RedisExecutor

from fivetran_events.fivetran_api import SERVICE_EVENTS
from fivetran_events.keys import last_test_event_key
from testkit.fivetran_api import TEST_API_KEY, TEST_API_SECRET, TEST_EVENT, FivetranStandIn
from testkit.servers import free_port, webhook_server
from testkit.support import OTHER_SECRET, SECRET
from webhook_app.cli import ExitCode, main

API_KEY, API_SECRET = TEST_API_KEY, TEST_API_SECRET


@pytest.fixture(scope="module")
def server(redis_proc: RedisExecutor, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The webhook app under gunicorn (secrets SECRET, OTHER_SECRET); yields its URL."""
    url = f"redis://{redis_proc.host}:{redis_proc.port}/0"
    with webhook_server(url, tmp_path_factory.mktemp("gunicorn"), workers=1) as (base, _):
        yield base + "/webhooks/fivetran"


def cli(env: dict[str, str], *args: str) -> Result:
    result = CliRunner().invoke(main, list(args), env=env)
    for secret in (API_SECRET, SECRET):  # in no output, error or not
        assert secret not in result.output, result.output
    return result


def webhooks(env: dict[str, str], *args: str) -> Result:
    """``fivetran-events fivetran webhooks ARGS``."""
    return cli(env, "fivetran", "webhooks", *args)


def created(env: dict[str, str], url: str, *args: str) -> dict[str, Any]:
    out = webhooks(env, "create", "--url", url, "--allow-insecure", "--json", *args)
    assert out.exit_code == 0, out.output
    body: dict[str, Any] = json.loads(out.output)
    return body


def history_keys(client: redis.Redis) -> set[bytes | str]:
    return set(client.keys("test:*"))


class TestCreate:
    def test_the_account_webhook_is_tested_against_the_running_server(
        self, env: dict[str, str], api: FivetranStandIn, server: str, client: redis.Redis
    ) -> None:
        """Fivetran's signed test_event reached the real app, which answered 200, noted
        its arrival (for setup checks) and recorded no history; the webhook has the
        server's secret and the service's events."""
        before = history_keys(client)
        got = created(env, server)
        assert (got["type"], got["group_id"], got["url"]) == ("account", None, server)
        assert got["events"] == list(SERVICE_EVENTS) and got["active"] is True
        assert [(d.url, d.body, d.status) for d in api.deliveries] == [(server, TEST_EVENT, 200)]
        assert api.webhooks[got["id"]]["secret"] == SECRET  # the first: the one the server checks
        assert history_keys(client) - before == {last_test_event_key("test:").encode()}

    def test_a_group_webhook_and_chosen_events(
        self, env: dict[str, str], api: FivetranStandIn, server: str
    ) -> None:
        api.group("projected_sickle", "Staging")
        got = created(
            env,
            server,
            "--group",
            "projected_sickle",
            "--events",
            "sync_end,sync_start",
            "--events",
            "sync_end",
        )
        assert (got["type"], got["group_id"]) == ("group", "projected_sickle")
        assert got["events"] == ["sync_end", "sync_start"]
        assert api.calls["POST /v1/webhooks/group/{id}"] == 1

    def test_text_output(self, env: dict[str, str], server: str) -> None:
        out = webhooks(env, "create", "--url", server, "--allow-insecure")
        assert out.exit_code == 0, out.output
        assert out.output.splitlines() == [
            f"created webhook webhook_1 for the account: {server} (active)",
            f"events: {', '.join(SERVICE_EVENTS)}",
            "Fivetran's signed test delivery to it was answered 2xx",
        ]

    def test_a_server_with_another_secret_refuses_the_test_and_nothing_is_created(
        self, env: dict[str, str], api: FivetranStandIn, server: str
    ) -> None:
        """The server answers the test 401 (wrong signature): Fivetran creates nothing, and
        the CLI says why with Fivetran's words (exit 5)."""
        out = webhooks(
            {**env, "FIVETRAN_EVENTS_WEBHOOK_SECRETS": "not-the-servers-secret-0123456789"},
            "create",
            "--url",
            server,
            "--allow-insecure",
        )
        assert out.exit_code == ExitCode.ERROR, out.output
        assert "POST /v1/webhooks/account: Fivetran answered 400" in out.output
        assert "Webhook test failed" in out.output and "status 401" in out.output
        assert api.webhooks == {} and [d.status for d in api.deliveries] == [401]

    def test_an_unknown_group_is_a_usage_error(
        self, env: dict[str, str], api: FivetranStandIn, server: str
    ) -> None:
        out = webhooks(
            env,
            "create",
            "--url",
            server,
            "--allow-insecure",
            "--group",
            "nope",
        )
        assert out.exit_code == ExitCode.USAGE, out.output
        assert "Fivetran has no group 'nope'" in out.output and api.deliveries == []

    @pytest.mark.parametrize(
        ("url", "why"),
        [
            ("http://fivetran-events.example.com/webhooks/fivetran", "is not https://"),
            ("https://127.0.0.1:8000/webhooks/fivetran", "loopback"),
            ("https://[::1]/webhooks/fivetran", "loopback"),
            ("https://localhost/webhooks/fivetran", "names localhost"),
            ("https://10.1.2.3/webhooks/fivetran", "private"),
            ("https://169.254.169.254/webhooks/fivetran", "link-local"),
        ],
    )
    def test_a_url_fivetran_cannot_reach_is_refused(
        self, env: dict[str, str], api: FivetranStandIn, url: str, why: str
    ) -> None:
        """Refused before any call (exit 2), naming the reason and --allow-insecure."""
        out = webhooks(env, "create", "--url", url)
        assert out.exit_code == ExitCode.USAGE, out.output
        assert why in out.output and "--allow-insecure" in out.output
        assert len(out.output.strip().splitlines()) == 1
        assert api.total_calls == 0

    @pytest.mark.parametrize(
        ("args", "named"),
        [
            (["--group", "bad group!"], "--group"),
            (["--events", "Sync End"], "--events"),
            (["--url", "https://x.example.com/" + "a" * 2100], "--url"),
        ],
    )
    def test_bad_input_is_a_usage_error(
        self, env: dict[str, str], api: FivetranStandIn, args: list[str], named: str
    ) -> None:
        out = webhooks(env, "create", "--url", "https://x.example.com/w", *args)
        assert out.exit_code == ExitCode.USAGE, out.output
        assert named in out.output and api.total_calls == 0

    def test_without_a_webhook_secret(self, env: dict[str, str], api: FivetranStandIn) -> None:
        env = {k: v for k, v in env.items() if k != "FIVETRAN_EVENTS_WEBHOOK_SECRETS"}
        out = webhooks(env, "create", "--url", "https://x.example.com/w")
        assert out.exit_code == ExitCode.USAGE, out.output
        assert "FIVETRAN_EVENTS_WEBHOOK_SECRETS is not set" in out.output
        assert api.total_calls == 0


class TestListAndTest:
    def test_list_shows_each_webhook_and_its_state(
        self, env: dict[str, str], api: FivetranStandIn, server: str
    ) -> None:
        api.group("g1")
        account = created(env, server)["id"]
        group = created(env, server, "--group", "g1", "--events", "sync_end")["id"]
        api.webhooks[group]["active"] = False  # as a webhook Fivetran deactivated
        out = webhooks(env, "list")
        assert out.exit_code == 0, out.output
        assert out.output.splitlines() == [
            "ID         TYPE     GROUP  STATE     EVENTS  URL",
            f"{account}  account  -      active    {len(SERVICE_EVENTS):<6}  {server}",
            f"{group}  group    g1     inactive  1       {server}",
        ]
        listed = json.loads(webhooks(env, "list", "--json").output)["webhooks"]
        assert [(w["id"], w["active"], w["group_id"]) for w in listed] == [
            (account, True, None),
            (group, False, "g1"),
        ]
        assert {w["created_by"] for w in listed} == {"_airworthy"}

    def test_test_sends_a_sample_the_server_answers_and_does_not_record(
        self, env: dict[str, str], api: FivetranStandIn, server: str, client: redis.Redis
    ) -> None:
        wid = created(env, server)["id"]
        before = history_keys(client)
        out = webhooks(env, "test", wid)
        assert out.exit_code == 0, out.output
        assert out.output.strip() == f"webhook {wid}: sample sync_start answered 200: ok (Success)"
        sample = api.deliveries[-1]
        assert (sample.body["event"], sample.body["connector_id"], sample.status) == (
            "sync_start",
            "_connection_1",
            200,
        )
        got = json.loads(webhooks(env, "test", wid, "--event", "sync_end", "--json").output)
        assert got == {
            "webhook_id": wid,
            "event": "sync_end",
            "succeed": True,
            "status": 200,
            "message": "Success",
        }
        assert history_keys(client) == before

    def test_a_failing_test_exits_1(
        self, env: dict[str, str], api: FivetranStandIn, server: str
    ) -> None:
        wid = created(env, server)["id"]
        api.webhooks[wid]["url"] = f"http://127.0.0.1:{free_port()}/webhooks/fivetran"
        out = webhooks(env, "test", wid)
        assert out.exit_code == ExitCode.FAILED, out.output
        assert "answered nothing (no answer): FAILED" in out.output

    def test_an_unknown_webhook_is_a_usage_error(self, env: dict[str, str]) -> None:
        out = webhooks(env, "test", "no_such_webhook")
        assert out.exit_code == ExitCode.USAGE, out.output
        assert "Fivetran has no webhook 'no_such_webhook'" in out.output
        assert "fivetran-events fivetran webhooks list" in out.output
        bad = webhooks(env, "test", "../account")
        assert bad.exit_code == ExitCode.USAGE and "ID" in bad.output


class TestUpdate:
    """Rotating the secret: the server accepts both (SECRET, OTHER_SECRET); the webhook
    gets the one listed first, and Fivetran's test of it must reach the server."""

    def test_rotate_secret_gives_fivetran_the_servers_first_secret(
        self, env: dict[str, str], api: FivetranStandIn, server: str
    ) -> None:
        wid = created(env, server)["id"]
        rotated = {**env, "FIVETRAN_EVENTS_WEBHOOK_SECRETS": f"{OTHER_SECRET},{SECRET}"}
        out = webhooks(rotated, "update", wid, "--rotate-secret")
        assert out.exit_code == 0, out.output
        assert OTHER_SECRET not in out.output
        assert out.output.splitlines() == [
            f"updated webhook {wid}: {server} (active)",
            "changed: secret",
            "Fivetran's signed test delivery to it was answered 2xx",
        ]
        assert api.webhooks[wid]["secret"] == OTHER_SECRET
        assert api.calls["PATCH /v1/webhooks/{id}"] == 1
        assert [(d.body, d.status) for d in api.deliveries[1:]] == [(TEST_EVENT, 200)]

    def test_a_secret_the_server_does_not_accept_changes_nothing(
        self, env: dict[str, str], api: FivetranStandIn, server: str
    ) -> None:
        """The server answers the new secret's test 401: Fivetran keeps the old one, the
        CLI says why in Fivetran's words (exit 5)."""
        wid = created(env, server)["id"]
        unknown = {
            **env,
            "FIVETRAN_EVENTS_WEBHOOK_SECRETS": "not-yet-the-servers-secret-0123456789",
        }
        out = webhooks(unknown, "update", wid, "--rotate-secret")
        assert out.exit_code == ExitCode.ERROR, out.output
        assert "PATCH /v1/webhooks/{id}" not in out.output  # the real path is named
        assert "Webhook test failed" in out.output and "status 401" in out.output
        assert api.webhooks[wid]["secret"] == SECRET
        assert [d.status for d in api.deliveries] == [200, 401]

    def test_url_and_state_without_a_test(
        self, env: dict[str, str], api: FivetranStandIn, server: str
    ) -> None:
        wid = created(env, server)["id"]
        other = server.replace("/webhooks/", "/elsewhere/")
        args = ("--url", other, "--allow-insecure", "--inactive", "--no-test", "--json")
        out = webhooks(env, "update", wid, *args)
        assert out.exit_code == 0, out.output
        got = json.loads(out.output)
        assert (got["url"], got["active"], got["changed"]) == (other, False, ["active", "url"])
        assert api.webhooks[wid]["secret"] == SECRET and len(api.deliveries) == 1

    @pytest.mark.parametrize(
        ("args", "said"),
        [
            ([], "nothing to change"),
            (["--url", "https://127.0.0.1/w"], "loopback"),
            (["--events", "Sync End"], "--events"),
        ],
    )
    def test_bad_input_is_a_usage_error(
        self, env: dict[str, str], api: FivetranStandIn, args: list[str], said: str
    ) -> None:
        out = webhooks(env, "update", "webhook_1", *args)
        assert out.exit_code == ExitCode.USAGE, out.output
        assert said in out.output and api.total_calls == 0

    def test_an_unknown_webhook_or_no_secret_is_a_usage_error(
        self, env: dict[str, str], api: FivetranStandIn
    ) -> None:
        out = webhooks(env, "update", "no_such_webhook", "--active")
        assert out.exit_code == ExitCode.USAGE, out.output
        assert "Fivetran has no webhook 'no_such_webhook'" in out.output
        env = {k: v for k, v in env.items() if k != "FIVETRAN_EVENTS_WEBHOOK_SECRETS"}
        out = webhooks(env, "update", "webhook_1", "--rotate-secret")
        assert out.exit_code == ExitCode.USAGE, out.output
        assert "FIVETRAN_EVENTS_WEBHOOK_SECRETS is not set" in out.output


class TestFailures:
    @pytest.mark.parametrize("missing", ["KEY", "SECRET"])
    def test_missing_credentials_name_the_setting(
        self, env: dict[str, str], api: FivetranStandIn, missing: str
    ) -> None:
        name = f"FIVETRAN_EVENTS_FIVETRAN_API_{missing}"
        out = webhooks({k: v for k, v in env.items() if k != name}, "list")
        assert out.exit_code == ExitCode.USAGE, out.output
        assert f"{name} must be set" in out.output and api.total_calls == 0

    def test_credentials_from_the_secrets_folder(
        self, env: dict[str, str], api: FivetranStandIn, tmp_path: Path
    ) -> None:
        (tmp_path / "fivetran_events_fivetran_api_secret").write_text(API_SECRET + "\n")
        env = {k: v for k, v in env.items() if k != "FIVETRAN_EVENTS_FIVETRAN_API_SECRET"}
        out = webhooks(
            {**env, "FIVETRAN_EVENTS_SECRETS_DIR": str(tmp_path)},
            "list",
            "--json",
        )
        assert out.exit_code == 0, out.output
        assert json.loads(out.output) == {"webhooks": []}

    def test_a_refused_key_exits_5(self, env: dict[str, str]) -> None:
        out = webhooks({**env, "FIVETRAN_EVENTS_FIVETRAN_API_SECRET": "wrong"}, "list")
        assert out.exit_code == ExitCode.ERROR, out.output
        assert out.output.startswith("Error: Fivetran refused the API key (GET /v1/webhooks:")
        assert "FIVETRAN_EVENTS_FIVETRAN_API_KEY" in out.output

    def test_an_unreachable_api_exits_4(self, env: dict[str, str]) -> None:
        url = f"http://127.0.0.1:{free_port()}"
        out = webhooks({**env, "FIVETRAN_EVENTS_FIVETRAN_API_URL": url}, "list")
        assert out.exit_code == ExitCode.UNREACHABLE, out.output
        assert (
            f"cannot reach Fivetran's API (GET /v1/webhooks: cannot reach Fivetran at {url}"
            in out.output
        )
        assert "FIVETRAN_EVENTS_FIVETRAN_API_URL" in out.output

    def test_a_rate_limit_past_the_retries_exits_4(
        self, env: dict[str, str], api: FivetranStandIn
    ) -> None:
        api.fail_next(1, retry_after="86400")
        out = webhooks(env, "list")
        assert out.exit_code == ExitCode.UNREACHABLE, out.output
        assert "Fivetran's API is unavailable now" in out.output and "429" in out.output
