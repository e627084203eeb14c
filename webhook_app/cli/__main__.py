"""``python -m webhook_app.cli``: the CLI, as the worker pool starts its members."""

from __future__ import annotations

from . import main

main(prog_name="fivetran-events")
