"""The worker is a program of its own: ``fivetran-events worker`` never loads the web app.

Real worker processes in burst mode against the suite's Redis and the Airflow 2 stand-in;
every process (the pool and its members) writes the modules it loaded as it exits, from a
``sitecustomize`` on its ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fivetran_events.deliveries import DeliveryState
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import post_event
from testkit.worker_process import worker_env
from webhook_app.forwarding.forwarder import Forwarder

pytestmark = pytest.mark.timeout(90)

#: The web program's libraries: a worker that loads one of them loads the web app.
WEB_ONLY = ("flask", "werkzeug", "gunicorn", "spectree")

#: Written into a folder on the processes' PYTHONPATH: each writes what it loaded at exit.
SITECUSTOMIZE = """
import atexit, json, os, sys

def _dump():
    path = os.path.join(os.environ["FTE_TEST_MODULES_DIR"], f"{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump({"argv": sys.argv, "modules": sorted(sys.modules)}, f)

atexit.register(_dump)
"""


def traced_env(base: dict[str, str], tmp: Path) -> dict[str, str]:
    """``base`` with the module-dumping ``sitecustomize`` on the path; dumps go to tmp/out."""
    (tmp / "site").mkdir()
    (tmp / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (tmp / "out").mkdir()
    return {**base, "PYTHONPATH": str(tmp / "site"), "FTE_TEST_MODULES_DIR": str(tmp / "out")}


def loaded(tmp: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((tmp / "out").glob("*.json"))]


def web_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in WEB_ONLY]


def test_a_worker_pool_forwards_without_the_web_app(
    http: Any, fw: Forwarder, standin: Airflow2StandIn, tmp_path: Path
) -> None:
    """A burst pool of two forwards a real delivery; neither the pool nor its members
    loaded Flask, Werkzeug, gunicorn or spectree."""
    post_event(http, sync_id="s1")
    env = traced_env(worker_env(fw.settings), tmp_path)
    exe = Path(sys.executable).parent / "fivetran-events"
    run = subprocess.run(
        [str(exe), "worker", "--burst", "--concurrency", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert [p["extra"]["sync_id"] for p in standin.posts] == ["s1"]
    dumps = loaded(tmp_path)
    assert len(dumps) == 3, [d["argv"] for d in dumps]  # the pool and its two members
    for dump in dumps:
        assert web_modules(dump["modules"]) == [], dump["argv"]
    assert any("webhook_app.worker.rq_worker" in d["modules"] for d in dumps)
    assert all(dd.state is DeliveryState.DELIVERED for dd in fw.store.recent(10))


def test_the_check_sees_the_web_app_where_it_is_loaded(tmp_path: Path) -> None:
    """The same check, on a process that asks for ``create_app``, finds Flask: a worker
    importing the web app would fail the test above."""
    env = traced_env({"PATH": "/usr/bin:/bin"}, tmp_path)
    code = "import webhook_app; webhook_app.create_app"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    (dump,) = loaded(tmp_path)
    assert "flask" in web_modules(dump["modules"])
