# The local stack, the tests and the checks; see README.md.
.PHONY: up down status venv install test test-unit test-unit-py310 test-integration test-system test-airflow-next lint docs hooks lock bench

# What `make test` and CI install: the pinned versions of requirements/lock.txt.
EXTRAS := server,airflow,sql,import,lineage,dev

up:        ## start Redis and the webhook app on 127.0.0.1 in the background
	@bash deploy/stack.sh up

down:      ## stop what `make up` started, and nothing else
	@bash deploy/stack.sh down

status:
	@bash deploy/stack.sh status

venv:      ## .venv with the locked versions: all that `make lint` and `make test-unit` need
	@bash deploy/venv.sh $(EXTRAS)

install: venv  ## and the tools the other tiers run (redis-server, nginx, chromium, ...: apt, npm)
	@bash deploy/ensure-test-tools.sh

# TEST_WORKERS pytest-xdist workers, each with its own Redis and Airflow (loadfile: a test
# file stays on one worker, so its module fixtures start once). --no-loadscope-reorder keeps
# tests/conftest.py's order, the longest files first, so none ends the run alone.
# TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 3
XDIST = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: install  ## every test folder: unit, integration, system
	@.venv/bin/python -m pytest $(XDIST)

test-unit: venv            ## no processes: seconds
	@.venv/bin/python -m pytest tests/unit

# requirements/lock.txt is for 3.11 (schemathesis, pydantic-settings 2.16 need it);
# requirements/lock-py310.txt is the same resolution as close as 3.10 allows (make lock).
test-unit-py310:           ## tests/unit on Python 3.10, in .venv310 (deploy/python310.sh finds it)
	@py=$$(bash deploy/python310.sh) && \
	    VENV=.venv310 PYTHON=$$py LOCK=requirements/lock-py310.txt bash deploy/venv.sh $(EXTRAS)
	@.venv310/bin/python -m pytest tests/unit

test-integration: install  ## real Redis, gunicorn, workers, stand-ins
	@.venv/bin/python -m pytest $(XDIST) tests/integration

test-system: install       ## real Airflow 3 (and 2.11 in a venv of its own)
	@.venv/bin/python -m pytest $(XDIST) tests/system

# The system tier's core on the newest Airflow 3.4 the registry serves (pre-releases too),
# in .venv-airflow-next beside the locked 3.3 (deploy/venv-airflow-next.sh): forwarding to
# a DAG run, the sensor's catch-up, a deferred sensor resumed by a sync, the asset
# watcher, partitioned events running a PartitionedAssetTimetable DAG, and the UI view.
# One Airflow for all of them (one pytest process): about 6 minutes on 2 cores.
SYSTEM_CORE = \
	tests/system/webhook_app/test_forward_airflow3.py::TestEndToEnd \
	tests/system/airflow_plugin/test_live.py::TestBackfillOnRealScheduler \
	tests/system/airflow_plugin/test_live.py::TestDeferredOnRealTriggerer::test_sync_arriving_while_deferred_releases_within_a_second \
	tests/system/airflow_plugin/test_event_trigger_live.py::TestWatcher::test_success_becomes_one_event_with_the_rest_extra_and_a_dag_run \
	tests/system/webhook_app/test_forward_partitions_airflow3.py \
	tests/system/airflow_plugin/test_ui.py::TestPages
test-airflow-next: install ## the system tier's core on the newest Airflow 3.4 (.venv-airflow-next)
	@bash deploy/venv-airflow-next.sh $(EXTRAS)
	@.venv-airflow-next/bin/python -m pytest -p no:cacheprovider $(SYSTEM_CORE)

lint: venv ## what CI checks: formatting, ruff's rules, mypy, the manual's strict build
	@.venv/bin/ruff format --check .
	@.venv/bin/ruff check .
	@.venv/bin/mypy
	@$(MAKE) -s docs

# Not --quiet: in mkdocs 1.6 it hides the warnings from --strict too, and the build passes.
# NO_MKDOCS_2_WARNING: Material's banner about MkDocs 2 (see pyproject.toml's dev extra).
docs:      ## the manual (docs/, mkdocs.yml) into .site/; a broken link or page fails it
	@NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict

hooks:     ## run `make lint`'s checks before each commit (.pre-commit-config.yaml)
	@.venv/bin/pre-commit install

lock:      ## re-pin requirements/lock*.txt from pyproject.toml's ranges (keeps pins it can)
	@.venv/bin/uv pip compile pyproject.toml --extra server --extra airflow --extra sql --extra import --extra lineage --extra dev \
	    --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	    --annotation-style line --custom-compile-command "make lock" \
	    --output-file requirements/lock.txt
	@.venv/bin/uv pip compile pyproject.toml --extra server --extra airflow --extra sql --extra import --extra lineage --extra dev \
	    --python-version 3.10 --python-platform x86_64-manylinux_2_28 \
	    --annotation-style line --custom-compile-command "make lock" \
	    --output-file requirements/lock-py310.txt

bench:
	@.venv/bin/python -m bench.ingest
