"""``fivetran-events reconcile``: record the completions Fivetran reports that the webhook
never delivered (fivetran_events/reconcile.py; the worker runs it on its own too)."""

from __future__ import annotations

import click

from fivetran_events import load_settings
from fivetran_events.timeutil import iso

from .. import reconciling
from .helpers import clean_errors, echo, emit_json, json_option, table


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

    Fivetran reports each connection's latest success (succeeded_at) and failure
    (failed_at). One the history has no end of that status near (5 minutes, from any
    source) is recorded, marked reconciled, and a success is forwarded once, like a
    delivered one. Only the latest of each per connection can be recovered this way:
    older gaps are the import's (fivetran-events import). Running it again records
    nothing new. Webhooks Fivetran reports inactive are listed.
    """
    s = load_settings()
    outcome = reconciling.run(s, forward=forward)
    if as_json:
        emit_json(outcome.to_dict())
        return
    echo(
        f"Reconciled {outcome.connections} connections: {len(outcome.recorded)} recorded "
        f"(reconciled), {outcome.known} already known, {outcome.skipped} skipped."
    )
    if outcome.recorded:
        table(
            [[e.connector_id, e.status, iso(e.created_ms), e.sync_id] for e in outcome.recorded],
            ["CONNECTOR", "STATUS", "ENDED", "SYNC"],
        )
    for w in outcome.inactive_webhooks:
        echo(f"Fivetran reports webhook {w['id']} ({w['url']}) INACTIVE: it delivers nothing.")


COMMANDS = (reconcile,)
