"""``fivetran-events connectors | history | decide``: reading the recorded history."""

from __future__ import annotations

from typing import Any

import click

from fivetran_events import load_settings
from fivetran_events.decision import Criterion, Outcome
from fivetran_events.freshness import late_text
from fivetran_events.reconcile import fivetran_side

from ..worker.build import build_forwarder
from .helpers import (
    ExitCode,
    check_connector,
    clean_errors,
    echo,
    emit_json,
    exit_with,
    json_option,
    parse_time,
    reader,
    table,
)


def _when(completion: dict[str, Any] | None) -> str | None:
    return completion["ended_at"] if completion else None


def _since(word: str, at: str | None) -> str:
    """``word since`` the ISO time ``at``, to the minute."""
    return f"{word} since {at[:16]}Z" if at else word


def _overdue(row: dict[str, Any]) -> str | None:
    """``no``, or by how much (``2h05m``); None without an objective."""
    late = row.get("overdue_seconds")
    return None if late is None else late_text(late) if late else "no"


def _state(lifecycle: dict[str, Any]) -> str:
    """Say whether the connector syncs: active, paused, deleted or broken (syncs run and fail)."""
    parts = []
    if lifecycle.get("state") in ("paused", "deleted"):
        parts.append(_since(lifecycle["state"], lifecycle.get("state_at")))
    if lifecycle.get("setup") == "broken":
        parts.append(_since("broken", lifecycle.get("setup_at")))
    return ", ".join(parts) or "active"


def _sync_id(row: dict[str, Any]) -> str:
    """The sync id, marked when it was derived and when it did not come from the webhook."""
    marks = [m for m in ("derived" if row.get("sync_id_derived") else None, row.get("source")) if m]
    return " ".join([str(row["sync_id"]), *(f"({m})" for m in marks)])


def _forwarding(deliveries: list[dict[str, Any]], on: bool) -> str:
    """Sum up the last success's deliveries in a word."""
    return ("/".join(sorted({d["state"] for d in deliveries})) or "-") if on else "off"


@click.command()
@json_option
@clean_errors
def connectors(as_json: bool) -> None:
    """List the recorded connectors: state, last success, last failure, running sync, forwarding.

    STATE is active, paused or deleted, and broken when Fivetran could not connect to the
    source. OVERDUE: how far past its due time (last success plus sync_frequency and a grace,
    or its objective), "no" when on time, "-" without one (manual, paused, never synced).
    FORWARDING: the last success's deliveries to Airflow (off without an Airflow URL).
    Webhooks Fivetran reported inactive follow.
    """
    s = load_settings()
    rows = reader(s).connectors()
    store = build_forwarder(s, with_airflow=False).store
    on = s.airflow_url is not None
    for row in rows:
        last = row["last_success"]
        found = store.for_syncs(row["connector_id"], [last["sync_id"]]) if last else {}
        row["forwarding"] = [
            {k: d.to_dict()[k] for k in ("uri", "state", "attempts", "airflow_event_id", "reason")}
            for d in (found.get(last["sync_id"], []) if last else [])
        ]
    side = fivetran_side(s.redis_client(), s.key_prefix)
    if as_json:
        body: dict[str, Any] = {"connectors": rows, "forwarding_enabled": on}
        if side is not None:
            body["fivetran"] = side
        emit_json(body)
        return
    table(
        [
            (
                r["connector_id"],
                r["connector_name"],
                _state(r["lifecycle"]),
                _when(r["last_success"]),
                _when(r["last_failure"]),
                _overdue(r),
                r["running"]["sync_id"] if r["running"] else None,
                _forwarding(r["forwarding"], on),
            )
            for r in rows
        ],
        (
            "CONNECTOR",
            "NAME",
            "STATE",
            "LAST SUCCESS",
            "LAST FAILURE",
            "OVERDUE",
            "RUNNING",
            "FORWARDING",
        ),
    )
    for w in side["inactive_webhooks"] if side is not None else ():
        echo(
            f"Fivetran reports webhook {w.get('id')} ({w.get('url')}) INACTIVE: it delivers "
            "nothing (fivetran webhooks list; reactivate it in Fivetran)."
        )


@click.command()
@click.argument("connector_id")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@json_option
@clean_errors
def history(connector_id: str, limit: int, as_json: bool) -> None:
    """Show a connector's syncs, newest first, with what Fivetran said of each.

    A sync id marked (derived) was made up because the delivery carried none, (imported)
    read from Fivetran's LOG table, (reconciled) reported by Fivetran's REST API only.
    """
    r = reader()
    check_connector(r, connector_id)
    rows = r.syncs(connector_id, limit=limit)
    if as_json:
        emit_json({"connector_id": connector_id, "syncs": rows})
        return
    table(
        [
            (
                _sync_id(x),
                x["status"],
                x["started_at"],
                x["ended_at"],
                x.get("task_type"),
                x.get("rescheduled_at"),
                x["reason"],
            )
            for x in rows
        ],
        ("SYNC ID", "STATUS", "STARTED", "ENDED", "TASK TYPE", "RESCHEDULED AT", "REASON"),
    )


@click.command(name="decide")
@click.argument("connector_id")
@click.option("--target", required=True, help="ISO 8601 time; naive means UTC.")
@click.option(
    "--propagate-failures-forward/--no-propagate-failures-forward", default=True, show_default=True
)
@click.option("--always-wait-when-syncing", is_flag=True, default=False)
@click.option(
    "--wait-when-paused",
    is_flag=True,
    default=False,
    help="Keep waiting on a paused or deleted connector instead of failing.",
)
@click.option(
    "--wait-when-broken",
    is_flag=True,
    default=False,
    help="Keep waiting on a broken connector (connection_failure) instead of failing.",
)
@click.option(
    "--criterion",
    type=click.Choice([c.value for c in Criterion]),
    default=Criterion.ENDED_AFTER.value,
    show_default=True,
)
@json_option
@clean_errors
def decide_cmd(
    connector_id: str, target: str, criterion: str, as_json: bool, **flags: bool
) -> None:
    """Decide whether CONNECTOR_ID was synced as of TARGET.

    Exit 0 success, 1 the sync failed, 3 wait (and 2, 4, 5 for errors, as for every command).
    A paused or deleted connector fails unless --wait-when-paused, a broken one unless
    --wait-when-broken; after a RESCHEDULED end the wait names when to look again.
    """
    target_ms = parse_time(target, "--target")
    r = reader()
    check_connector(r, connector_id)
    result = r.decide(connector_id, target_ms, criterion=criterion, **flags)
    if as_json:
        emit_json({"connector_id": connector_id, **result.to_dict()})
    else:
        echo(f"{result.outcome.value.upper()}: {result.reason}")
        recheck = result.to_dict()["recheck_at"]
        if recheck is not None:
            echo(f"recheck at: {recheck}")
    codes = {Outcome.SUCCESS: ExitCode.OK, Outcome.FAIL: ExitCode.FAILED}
    exit_with(codes.get(result.outcome, ExitCode.WAIT))


COMMANDS: list[click.Command] = [connectors, history, decide_cmd]
