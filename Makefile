# The local stack and the tests; see README.md.
.PHONY: up down status test lint bench

up:        ## start Redis and the webhook app on 127.0.0.1 in the background
	@bash deploy/stack.sh up

down:      ## stop what `make up` started, and nothing else
	@bash deploy/stack.sh down

status:
	@bash deploy/stack.sh status

test:      ## install what the tests need and run them all
	@bash deploy/venv.sh server,airflow,dev
	@bash deploy/ensure-test-tools.sh
	@.venv/bin/python -m pytest

lint:
	@.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy

bench:
	@.venv/bin/python -m bench.ingest
