"""A bad sentinel URL stops the CLI and the webhook server before they start (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from testkit.support import SECRET
from webhook_app.cli import main

BAD = "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380"  # no service name


@pytest.mark.parametrize("args", [["connectors"], ["serve", "--port", "1"], ["worker", "--burst"]])
def test_bad_sentinel_url_is_one_line_and_exit_2(args: list[str], tmp_path: Path) -> None:
    """``serve`` refuses before gunicorn starts; every command names the variable."""
    env = {
        "FIVETRAN_EVENTS_REDIS_URL": BAD,
        "FIVETRAN_EVENTS_WEBHOOK_SECRETS": SECRET,
        # serve sets it when unset; named here, the runner restores it after the test
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
    }
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "FIVETRAN_EVENTS_REDIS_URL" in lines[0] and "/service_name" in lines[0], lines[0]
