"""``fivetran-events migrate``: convert a key layout v1 history to the current layout, online.

The work is ``fivetran_events.migration``'s; this module shows progress on stderr (so
stdout stays one summary, text or ``--json``) and maps its refusal to exit code 2.
"""

from __future__ import annotations

import time
from typing import Any

import click

from fivetran_events import load_settings
from fivetran_events.migration import LAYOUT_VERSION, Migration, Plan, Progress

from .helpers import clean_errors, echo, emit_json, json_option

#: Seconds between two progress lines (the last connector always gets one).
PROGRESS_EVERY = 1.0
#: Two processes: a replay is client-bound, and a second process nearly doubles the
#: rate on two cores while leaving Redis and the webhook room.
DEFAULT_JOBS = 2


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


class ProgressLine:
    """Print one progress line on stderr at most every PROGRESS_EVERY seconds."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.last = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        final = p.connectors_done == p.connectors_total
        if self.quiet or (now - self.last < PROGRESS_EVERY and not final):
            return
        self.last = now
        echo(
            f"migrate: {p.connectors_done}/{p.connectors_total} connectors, "
            f"{p.syncs_done}/{p.syncs_total} syncs, {p.rate:.0f} syncs/s, "
            f"ETA {_eta(p.eta)}",
            err=True,
        )


def _summary(plan: Plan, dry_run: bool, progress: Progress | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "dry_run": dry_run,
        "layout_before": plan.layout,
        "layout": LAYOUT_VERSION if (progress is not None and not plan.scan.empty) else plan.layout,
        "connectors": len(plan.connectors),
        "syncs": sum(plan.syncs.values()),
        "resumed_connectors": plan.resumed,
        "current_layout_keys": plan.scan.current,
        "shared_keys": plan.scan.shared,
        "nothing_to_do": not plan.connectors,
    }
    if progress is not None:
        body.update(
            events_recorded=progress.recorded,
            events_duplicate=progress.duplicates,
            events_ignored=progress.ignored,
            seconds=round(progress.elapsed, 3),
        )
    return body


def _text(body: dict[str, Any]) -> str:
    if body["nothing_to_do"]:
        return (
            "nothing to migrate: no layout v1 history under the prefix "
            f"(layout marker: {body['layout'] or 'none'})"
        )
    what = f"{body['connectors']} connector(s), {body['syncs']} sync(s)"
    if body["dry_run"]:
        resumed = body["resumed_connectors"]
        again = f"; {resumed} connector(s) already done by an earlier run" if resumed else ""
        return f"would migrate {what} from layout v1 to v{LAYOUT_VERSION}{again}"
    return (
        f"migrated {what} to layout v{LAYOUT_VERSION} in {body['seconds']:.1f} s "
        f"({body['events_recorded']} events recorded, {body['events_duplicate']} already "
        f"there, {body['events_ignored']} older than the retention)"
    )


@click.command()
@click.option(
    "--dry-run", is_flag=True, help="Scan and report what would be migrated; change nothing."
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 32),
    default=DEFAULT_JOBS,
    show_default=True,
    help="Processes migrating connectors side by side.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
@json_option
@clean_errors
def migrate(dry_run: bool, jobs: int, quiet: bool, as_json: bool) -> None:
    """Migrate the history under FIVETRAN_EVENTS_KEY_PREFIX from key layout v1.

    Online: the webhook keeps recording while it runs. Idempotent and resumable: run it
    again after an interruption; a run with nothing to do says so and exits 0. It scans
    the prefix first and refuses (exit 2, changing nothing) when a key there belongs to
    no known layout, naming up to ten of them. Progress goes to stderr.
    """
    s = load_settings()
    migration = Migration(s.redis_client(), s.key_prefix, s.retention_ms, ProgressLine(quiet))
    plan = migration.plan()
    if plan.connectors and not (dry_run or quiet):
        resumed = f", resuming after {plan.resumed} done by an earlier run" if plan.resumed else ""
        echo(
            f"migrate: {len(plan.connectors)} connectors, {sum(plan.syncs.values())} syncs "
            f"to go{resumed}",
            err=True,
        )
    progress = None if dry_run else migration.run(plan, jobs, s.redis_client)
    body = _summary(plan, dry_run, progress)
    if as_json:
        emit_json(body)
    else:
        echo(_text(body))


#: What the group registers.
COMMANDS: list[click.Command] = [migrate]
