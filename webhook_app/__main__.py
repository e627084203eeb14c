"""``python -m webhook_app``: the ``fivetran-events`` command line."""

from webhook_app.cli import main

main()
