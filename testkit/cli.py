"""The CLI run in this process, as a script would see it: exit code and stderr."""

from __future__ import annotations

from click.testing import CliRunner, Result


def cli(env: dict[str, str], *args: str) -> Result:
    """Run ``fivetran-events ARGS`` in-process with ``env`` as its environment."""
    from webhook_app.cli import main

    return CliRunner().invoke(main, list(args), env=env)


def one_line(result: Result) -> str:
    """The error's only line on stderr (no traceback, no usage block)."""
    # the in-process Airflow stand-in's own log lines (JSON) share stderr; skip them
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("{")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]
