"""``fivetran-events fivetran webhooks create | list | test | update`` and ``reconcile``:
Fivetran's side, through its REST API (``FIVETRAN_EVENTS_FIVETRAN_API_KEY`` and ``_SECRET``).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

import click

from fivetran_events import load_settings
from fivetran_events.exceptions import FivetranNotFound
from fivetran_events.fivetran_api import SERVICE_EVENTS, FivetranClient
from fivetran_events.fivetran_records import Webhook, describe
from fivetran_events.timeutil import iso

from ..worker.schedule import reconcile_run
from .helpers import (
    CliError,
    ExitCode,
    check_id,
    clean_errors,
    echo,
    emit_json,
    exit_with,
    json_option,
    table,
)

#: What an event name looks like (Fivetran's are lower-case words joined by ``_``).
EVENT_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: Longest webhook URL accepted.
MAX_URL_LENGTH = 2048


def unreachable_reason(url: str) -> str | None:
    """Say why Fivetran (over HTTPS, from the internet) could not deliver to ``url``, or None;
    a host name is not resolved (Fivetran may see another answer: its test delivery settles it)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018  # a port that is not a number raises here
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme != "https":
        return "is not https:// (Fivetran delivers webhooks over HTTPS only)"
    if not host:
        return "has no host"
    if host == "localhost" or host.endswith(".localhost"):
        return f"names {host}, which is this machine, not one Fivetran can reach"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if address.is_loopback:
        return f"names the loopback address {host}"
    if address.is_link_local:
        return f"names the link-local address {host}"
    if address.is_private or not address.is_global:
        return f"names {host}, a private or non-public address Fivetran cannot reach"
    return None


def _checked_url(url: str, allow_insecure: bool) -> str:
    """``url`` if Fivetran can deliver to it (or ``allow_insecure``); else a usage error."""
    if len(url) > MAX_URL_LENGTH:
        raise click.BadParameter(f"is longer than {MAX_URL_LENGTH} characters", param_hint="--url")
    reason = unreachable_reason(url)
    if reason is not None and not allow_insecure:
        raise click.BadParameter(
            f"{url!r} {reason}; give the server's public HTTPS URL, or --allow-insecure for a test",
            param_hint="--url",
        )
    return url


def _server_secret() -> str:
    """The secret the server signs with first: FIVETRAN_EVENTS_WEBHOOK_SECRETS' first."""
    secrets = load_settings().webhook_secrets
    if not secrets:
        raise CliError(
            "FIVETRAN_EVENTS_WEBHOOK_SECRETS is not set: the webhook is given the secret the "
            "server checks deliveries with, so set it (and restart the server)",
            ExitCode.USAGE,
        )
    return secrets[0]


def _no_webhook(webhook_id: str, exc: FivetranNotFound) -> CliError:
    return CliError(
        f"Fivetran has no webhook {webhook_id!r} ({exc}): see "
        "`fivetran-events fivetran webhooks list`",
        ExitCode.USAGE,
    )


def _client() -> FivetranClient:
    return FivetranClient.from_settings(load_settings())


def _events(values: tuple[str, ...]) -> list[str]:
    """The events given (comma-separated, repeatable), in order, once each."""
    events = [e.strip() for value in values for e in value.split(",") if e.strip()]
    bad = [e for e in events if not EVENT_NAME.fullmatch(e)]
    if bad:
        raise click.BadParameter(
            f"{bad[0]!r} is not an event name (lower-case words joined by '_', e.g. sync_end)",
            param_hint="--events",
        )
    return list(dict.fromkeys(events)) or list(SERVICE_EVENTS)


def _state(webhook: Webhook) -> str:
    return "active" if webhook.active else "inactive"


@click.group()
def fivetran() -> None:
    """Fivetran's side, through its REST API (FIVETRAN_EVENTS_FIVETRAN_API_KEY, _SECRET)."""


@fivetran.group()
def webhooks() -> None:
    """The account's and groups' webhooks: create the service's, list, test, update one."""


@webhooks.command()
@click.option("--url", required=True, help="The server's public HTTPS URL of /webhooks/fivetran.")
@click.option("--group", "group_id", help="Create a group webhook (default: the account's).")
@click.option(
    "--events",
    "event_values",
    multiple=True,
    help="Events to subscribe to, comma-separated or repeated "
    f"(default: the ones the service records: {', '.join(SERVICE_EVENTS)}).",
)
@click.option(
    "--allow-insecure",
    is_flag=True,
    help="Accept a URL Fivetran cannot reach from outside (http://, localhost, a private "
    "address): for a stand-in or a test.",
)
@json_option
@clean_errors
def create(
    url: str,
    group_id: str | None,
    event_values: tuple[str, ...],
    allow_insecure: bool,
    as_json: bool,
) -> None:
    """Create the webhook with the server's secret; Fivetran tests it against the server.

    The secret is the first of FIVETRAN_EVENTS_WEBHOOK_SECRETS. Fivetran POSTs a signed test_event
    to URL and creates nothing without a 2xx, so the server must be running and reachable there.
    """
    _checked_url(url, allow_insecure)
    if group_id is not None:
        check_id(group_id, "--group")
    events = _events(event_values)
    secret = _server_secret()
    with _client() as client:
        try:
            if group_id is None:
                webhook = client.create_account_webhook(url, events, secret)
            else:
                webhook = client.create_group_webhook(group_id, url, events, secret)
        except FivetranNotFound as exc:
            if group_id is None:
                raise
            raise CliError(
                f"Fivetran has no group {group_id!r} ({exc}); its groups' ids are in "
                "Fivetran's dashboard or GET /v1/groups",
                ExitCode.USAGE,
            ) from None
    if as_json:
        emit_json(describe(webhook))
        return
    scope = f"group {webhook.group_id}" if webhook.group_id else "the account"
    echo(f"created webhook {webhook.id} for {scope}: {webhook.url} ({_state(webhook)})")
    echo(f"events: {', '.join(webhook.events)}")
    if webhook.active:
        echo("Fivetran's signed test delivery to it was answered 2xx")


@webhooks.command(name="list")
@json_option
@clean_errors
def list_webhooks(as_json: bool) -> None:
    """List the account's webhooks: id, account or group, active or not, URL."""
    with _client() as client:
        found = client.webhooks()
    if as_json:
        emit_json({"webhooks": describe(found)})
        return
    table(
        [(w.id, w.type, w.group_id, _state(w), len(w.events), w.url) for w in found],
        ("ID", "TYPE", "GROUP", "STATE", "EVENTS", "URL"),
    )


@webhooks.command()
@click.argument("webhook_id", metavar="ID")
@click.option(
    "--event",
    default="sync_start",
    show_default=True,
    help="The sample event Fivetran sends.",
)
@json_option
@clean_errors
def test(webhook_id: str, event: str, as_json: bool) -> None:
    """Have Fivetran send a sample event to the webhook ID's URL; say what it answered (exit 1
    when not a 2xx: Fivetran reports the status it got)."""
    check_id(webhook_id, "ID")
    if not EVENT_NAME.fullmatch(event):
        raise click.BadParameter(f"{event!r} is not an event name", param_hint="--event")
    with _client() as client:
        try:
            result = client.test_webhook(webhook_id, event)
        except FivetranNotFound as exc:
            raise _no_webhook(webhook_id, exc) from None
    if as_json:
        emit_json({"webhook_id": webhook_id, "event": event, **describe(result)})
    else:
        got = str(result.status) if result.status else "nothing (no answer)"
        verdict = "ok" if result.succeed else "FAILED"
        said = f" ({result.message})" if result.message else ""
        echo(f"webhook {webhook_id}: sample {event} answered {got}: {verdict}{said}")
    if not result.succeed:
        exit_with(ExitCode.FAILED)


@webhooks.command()
@click.argument("webhook_id", metavar="ID")
@click.option(
    "--rotate-secret",
    is_flag=True,
    help="Give the webhook the server's current secret, the first of "
    "FIVETRAN_EVENTS_WEBHOOK_SECRETS (rotating it: docs/operations.md).",
)
@click.option("--url", help="A new public HTTPS URL of the server's /webhooks/fivetran.")
@click.option(
    "--events", "event_values", multiple=True, help="The events, comma-separated or repeated."
)
@click.option("--active/--inactive", default=None, help="Turn deliveries on or off.")
@click.option(
    "--test/--no-test",
    "run_tests",
    default=True,
    show_default=True,
    help="Have Fivetran POST a signed test_event to the (new) URL with the (new) secret "
    "first; it changes nothing unless that is answered 2xx.",
)
@click.option("--allow-insecure", is_flag=True, help="Accept a URL Fivetran cannot reach (a test).")
@json_option
@clean_errors
def update(
    webhook_id: str,
    rotate_secret: bool,
    url: str | None,
    event_values: tuple[str, ...],
    active: bool | None,
    run_tests: bool,
    allow_insecure: bool,
    as_json: bool,
) -> None:
    """Change the webhook ID on Fivetran's side: its secret, URL, events or state.

    The secret is never an argument (argv is visible to every user of the machine): with
    --rotate-secret the webhook gets the first of FIVETRAN_EVENTS_WEBHOOK_SECRETS, which
    the server must already accept (it accepts every one listed).
    """
    check_id(webhook_id, "ID")
    fields: dict[str, object] = {}
    if url is not None:
        fields["url"] = _checked_url(url, allow_insecure)
    if event_values:
        fields["events"] = _events(event_values)
    if active is not None:
        fields["active"] = active
    if rotate_secret:
        fields["secret"] = _server_secret()
    if not fields:
        raise CliError(
            "nothing to change: give --rotate-secret, --url, --events, --active or --inactive",
            ExitCode.USAGE,
        )
    with _client() as client:
        try:
            webhook = client.update_webhook(webhook_id, fields, run_tests=run_tests)
        except FivetranNotFound as exc:
            raise _no_webhook(webhook_id, exc) from None
    if as_json:
        emit_json({**describe(webhook), "changed": sorted(fields)})
        return
    echo(f"updated webhook {webhook.id}: {webhook.url} ({_state(webhook)})")
    echo(f"changed: {', '.join(sorted(fields))}")
    if run_tests and webhook.active:
        echo("Fivetran's signed test delivery to it was answered 2xx")


@click.command()
@click.option(
    "--forward/--no-forward",
    default=True,
    show_default=True,
    help="Forward the recorded successes to Airflow as the webhook would "
    "(when FIVETRAN_EVENTS_AIRFLOW_URL is set).",
)
@json_option
@clean_errors
def reconcile(forward: bool, as_json: bool) -> None:
    """Compare Fivetran's connections with the history; record what the webhook missed.

    Fivetran reports each connection's latest success and failure; one the history has
    no end of that status near (5 minutes) is recorded, marked reconciled, and a success
    is forwarded once. Older gaps are the import's. Webhooks reported inactive are listed.
    """
    s = load_settings()
    outcome = reconcile_run(s, forward=forward)
    if as_json:
        emit_json(outcome.to_dict())
        return
    echo(
        f"Reconciled {outcome.connections} connections: {len(outcome.recorded)} recorded "
        f"(reconciled), {outcome.known} already known, {outcome.skipped} skipped; "
        f"{outcome.sync_histories} sync histories read."
    )
    if outcome.recorded:
        table(
            [[e.connector_id, e.status, iso(e.created_ms), e.sync_id] for e in outcome.recorded],
            ["CONNECTOR", "STATUS", "ENDED", "SYNC"],
        )
    for w in outcome.inactive_webhooks:
        echo(f"Fivetran reports webhook {w['id']} ({w['url']}) INACTIVE: it delivers nothing.")


COMMANDS: list[click.Command] = [fivetran, reconcile]
