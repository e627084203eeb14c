"""The README's first command: `make up` starts the whole stack (Redis, webhook app,
worker, a real Airflow with the example DAGs) and shows a DAG run; `make down` stops it."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from testkit.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[3]


def make(target: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-s", target],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stack_env(state: Path) -> dict[str, str]:
    """The environment of a new user's shell, with the stack on free ports under ``state``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIVETRAN_EVENTS_", "AIRFLOW"))}
    env.update(
        FTE_STATE_DIR=str(state),
        FTE_WEBHOOK_PORT=str(free_port()),
        FTE_REDIS_PORT=str(free_port()),
        FTE_AIRFLOW_PORT=str(free_port()),
    )
    return env


def check_progress(out: str) -> None:
    """Each phase is numbered, each line says the seconds passed, waits say what they wait for."""
    lines = [line for line in out.splitlines() if "==>" in line]
    assert lines and all(re.match(r"\[\s*\d+s\] ==> ", line) for line in lines), lines
    steps = [int(m.group(1)) for line in lines if (m := re.search(r"==> \((\d)/7\) ", line))]
    assert steps == list(range(1, 8)), lines
    seconds = [int(re.match(r"\[\s*(\d+)s\]", line).group(1)) for line in lines]  # type: ignore[union-attr]
    assert seconds == sorted(seconds)
    assert any(
        re.search(r"waiting for Airflow's API server at http://127.0.0.1:\d+/", line)
        for line in lines
    )
    assert any(re.search(r"Airflow's API server answers after \d+s", line) for line in lines)


MARK = "<!-- runs against the local stack -->"
#: A marked block: the mark on a line of its own, right above a ```sh block.
MARKED_BLOCK = re.compile(rf"^{re.escape(MARK)}\n```sh\n(.*?)\n```$", re.MULTILINE | re.DOTALL)


def nav_pages(nav: list[object]) -> list[str]:
    """The pages of mkdocs.yml's nav (its entries nest), in order."""
    pages = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages += nav_pages(value) if isinstance(value, list) else [str(value)]
    return pages


def manual_pages() -> list[Path]:
    """README.md, then the manual's pages in reading order (mkdocs.yml's nav), the order
    in which the marked blocks build on each other: a delivery is sent, then read."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return [ROOT / "README.md", *(ROOT / config["docs_dir"] / p for p in nav_pages(config["nav"]))]


def manual_blocks() -> list[str]:
    """The shell blocks of the README and the manual marked as runnable against the stack."""
    return [block for page in manual_pages() for block in MARKED_BLOCK.findall(page.read_text())]


def test_every_marked_page_is_read() -> None:
    """A marked block on a page outside the nav would never run: mkdocs' strict build
    refuses such a page, and this reads every page the nav lists."""
    read = set(manual_pages())
    marked = {p for p in (ROOT / "docs").rglob("*.md") if MARKED_BLOCK.search(p.read_text())}
    assert marked and marked <= read, sorted(map(str, marked - read))


def run_manual_blocks(env: dict[str, str], webhook_port: str) -> list[str]:
    """Run each marked block as a new user would paste it (only the port differs)."""
    outputs = []
    for block in manual_blocks():
        script = block.replace("127.0.0.1:8000", f"127.0.0.1:{webhook_port}")
        out = subprocess.run(
            ["bash", "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        for bad in ("Traceback", "command not found", "No such file", "Usage:"):
            assert bad not in out.stderr, f"{block}\n---\n{out.stderr}"
        outputs.append(out.stdout + out.stderr)
    return outputs


def test_up_curl_down(tmp_path: Path) -> None:
    """make up returns healthy and prints a curl that works; make down stops exactly it."""
    env = stack_env(tmp_path)
    up = make("up", env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "The stack is up." in up.stdout
        check_progress(up.stdout)
        assert re.search(r"migrating Airflow's database: done in \d+s", up.stdout), up.stdout
        # The asset-scheduled example DAG ran because of the demo sync it sent.
        assert re.search(
            r"fivetran_asset_consumer run \S+ started [0-9.]+ s after the "
            r"webhook",
            up.stdout,
        ), up.stdout
        pids = [
            int((tmp_path / f).read_text().split()[0])
            for f in (
                "webhook.pid",
                "redis.pid",
                "worker.pid",
                "airflow-api-server.pid",
                "airflow-scheduler.pid",
                "airflow-dag-processor.pid",
                "airflow-triggerer.pid",
            )
        ]
        assert all(pid_alive(p) for p in pids)
        # Run the printed curl exactly as a user would paste it.
        block = up.stdout.split("Send a signed sync_end, as Fivetran would:\n", 1)[1]
        curl = block.split("\nThen look at it:", 1)[0].replace("\\\n", " ")
        sent = subprocess.run(
            shlex.split(curl), capture_output=True, text=True, timeout=30, check=True
        )
        assert '"status":"recorded"' in sent.stdout
        look = re.search(r"Then look at it:\n\s+(.+)\n", up.stdout)
        assert look is not None
        seen = subprocess.run(
            look.group(1), shell=True, capture_output=True, text=True, timeout=30, check=True
        )
        assert '"status":"SUCCESSFUL"' in seen.stdout
        # The manual's examples, run as written against this stack.
        hand, api, cli, forwarding = run_manual_blocks(env, env["FTE_WEBHOOK_PORT"])
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


def test_a_failing_component_shows_its_log(tmp_path: Path) -> None:
    """The webhook's port is taken: up stops at once with gunicorn's last lines and the path."""
    env = stack_env(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", int(env["FTE_WEBHOOK_PORT"])))
        taken.listen()
        try:
            up = make("up", env)
        finally:
            down = make("down", env)
    assert up.returncode != 0
    log = tmp_path / "webhook.log"
    assert "webhook exited while waiting for the webhook app" in up.stderr, up.stderr
    assert f"the last 25 lines of {log}:" in up.stderr
    assert "Connection in use" in up.stderr  # gunicorn's own words, from the log
    assert f"the whole log: {log}" in up.stderr
    assert re.search(r"\(3/7\) the webhook app", up.stdout), up.stdout
    assert down.returncode == 0, down.stderr
