"""The README's first command: `make up` starts the whole stack (Redis, webhook app,
worker, a real Airflow with the example DAGs) and shows a DAG run; `make down` stops it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from ..servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]


def make(target: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", target], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


MARK = "<!-- runs against the local stack -->"


def readme_blocks() -> list[str]:
    """The README's shell blocks marked as runnable against the local stack."""
    text = (ROOT / "README.md").read_text()
    blocks = []
    for part in text.split(MARK)[1:]:
        body = part.split("```sh\n", 1)[1].split("\n```", 1)[0]
        blocks.append(body)
    return blocks


def run_readme_blocks(env: dict[str, str], webhook_port: str) -> list[str]:
    """Run each marked block as a new user would paste it (only the port differs)."""
    outputs = []
    for block in readme_blocks():
        script = block.replace("127.0.0.1:8000", f"127.0.0.1:{webhook_port}")
        out = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=120, check=False)
        for bad in ("Traceback", "command not found", "No such file", "Usage:"):
            assert bad not in out.stderr, f"{block}\n---\n{out.stderr}"
        outputs.append(out.stdout + out.stderr)
    return outputs


def test_up_curl_down(tmp_path: Path) -> None:
    """make up returns healthy and prints a curl that works; make down stops exactly it."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FIVETRAN_EVENTS_", "AIRFLOW"))}
    env.update(FTE_STATE_DIR=str(tmp_path), FTE_WEBHOOK_PORT=str(free_port()),
               FTE_REDIS_PORT=str(free_port()), FTE_AIRFLOW_PORT=str(free_port()))
    up = make("up", env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "The stack is up." in up.stdout
        # The asset-scheduled example DAG ran because of the demo sync it sent.
        assert re.search(r"fivetran_asset_consumer run \S+ started [0-9.]+ s after the "
                         r"webhook", up.stdout), up.stdout
        pids = [int((tmp_path / f).read_text().split()[0]) for f in (
            "webhook.pid", "redis.pid", "worker.pid", "airflow-api-server.pid",
            "airflow-scheduler.pid", "airflow-dag-processor.pid", "airflow-triggerer.pid")]
        assert all(pid_alive(p) for p in pids)
        # Run the printed curl exactly as a user would paste it.
        block = up.stdout.split("Send a signed sync_end, as Fivetran would:\n", 1)[1]
        curl = block.split("\nThen look at it:", 1)[0].replace("\\\n", " ")
        sent = subprocess.run(shlex.split(curl), capture_output=True, text=True, timeout=30,
                              check=True)
        assert '"status":"recorded"' in sent.stdout
        look = re.search(r"Then look at it:\n\s+(.+)\n", up.stdout)
        assert look is not None
        seen = subprocess.run(look.group(1), shell=True, capture_output=True, text=True,
                              timeout=30, check=True)
        assert '"status":"SUCCESSFUL"' in seen.stdout
        # The README's examples, run as written against this stack.
        hand, api, cli, forwarding = run_readme_blocks(env, env["FTE_WEBHOOK_PORT"])
        assert '"status":"recorded"' in hand
        assert '"connector_id":"my_connector"' in api and '"decision":"success"' in api
        assert "SUCCESS:" in cli and '"decision": "wait"' in cli
        assert "demo_connector" in forwarding and "my_connector" in forwarding
        again = make("up", env)  # idempotent: a second `up` reuses what runs
        assert again.returncode == 0 and "already running" in again.stdout
    finally:
        down = make("down", env)
    assert down.returncode == 0, down.stderr
    assert not any(pid_alive(p) for p in pids)
    assert (tmp_path / "redis" / "appendonlydir").exists()  # AOF persistence is on
