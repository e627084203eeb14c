"""What ``fivetran-events worker`` checks and opens as it starts: Redis's eviction policy
(logged, never a refusal) and the address its metrics are served on.

Real redis-servers of the tests' own (their ``maxmemory-policy`` and ACL users set as a
managed Redis might), real worker processes and the Airflow 2 stand-in.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from fivetran_events import Settings
from testkit.airflow2_standin import Airflow2StandIn
from testkit.own_redis import own_redis
from testkit.processes import free_port, poll_until
from testkit.worker_process import WorkerProcess, worker_env
from webhook_app.forwarding.forwarder import Forwarder
from webhook_app.worker.rq_worker import check_eviction

pytestmark = pytest.mark.timeout(90)

#: A loopback address other than 127.0.0.1: where the metrics go only when asked to.
OTHER_LOOPBACK = "127.0.0.2"


def burst(settings: Settings) -> subprocess.CompletedProcess[str]:
    """Run ``fivetran-events worker --burst --concurrency 1`` to its end."""
    exe = Path(sys.executable).parent / "fivetran-events"
    return subprocess.run(
        [str(exe), "worker", "--burst", "--concurrency", "1"],
        env=worker_env(settings, log_format="console"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class TestEvictionPolicy:
    @pytest.mark.parametrize("policy", ["volatile-lru", "allkeys-lru", "noeviction"])
    def test_the_worker_says_so_at_start_and_works(
        self, fw: Forwarder, tmp_path: Path, policy: str
    ) -> None:
        """Any policy but noeviction is an error line naming it; the worker runs anyway
        (a managed Redis may not let it be changed)."""
        with own_redis(tmp_path / "redis", "--maxmemory-policy", policy) as server:
            run = burst(fw.settings.model_copy(update={"redis_url": server.url}))
        assert run.returncode == 0, run.stderr[-3000:]
        said = [line for line in run.stderr.splitlines() if "maxmemory-policy" in line]
        if policy == "noeviction":
            assert said == [], run.stderr
        else:
            assert len(said) == 1 and "[error" in said[0], run.stderr
            assert policy in said[0] and "noeviction" in said[0]

    def test_a_user_without_config_still_learns_it(self, fw: Forwarder, tmp_path: Path) -> None:
        """A user refused CONFIG (as on managed Redis) reads the policy from INFO."""
        with own_redis(tmp_path / "redis", "--maxmemory-policy", "volatile-ttl") as server:
            server.client().acl_setuser(
                "app",
                enabled=True,
                passwords=["+app-password"],
                keys=["*"],
                channels=["*"],
                commands=["+@all", "-config"],
            )
            url = server.url.replace("redis://", "redis://app:app-password@")
            run = burst(fw.settings.model_copy(update={"redis_url": url}))
        assert run.returncode == 0, run.stderr[-3000:]
        assert "maxmemory-policy is volatile-ttl" in run.stderr, run.stderr

    @pytest.mark.parametrize(
        ("refused", "said"),
        [(["-info"], "maxmemory-policy is volatile-lru"), (["-info", "-config"], "cannot read")],
    )
    def test_info_or_config_refused(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture, refused: list[str], said: str
    ) -> None:
        """INFO refused: CONFIG GET answers; both refused: a warning that it cannot be
        read, and the check does not fail."""
        with own_redis(tmp_path / "redis", "--maxmemory-policy", "volatile-lru") as server:
            server.client().acl_setuser(
                "app",
                enabled=True,
                passwords=["+app-password"],
                keys=["*"],
                commands=["+@all", *refused],
            )
            client = redis.Redis(
                host="127.0.0.1", port=server.port, username="app", password="app-password"
            )
            with caplog.at_level("WARNING", logger="webhook_app.worker.rq_worker"):
                check_eviction(client)
        (record,) = caplog.records
        assert said in record.getMessage()
        assert record.levelname == ("ERROR" if said.startswith("maxmemory") else "WARNING")


class TestMetricsHost:
    @pytest.mark.parametrize(
        ("concurrency", "how"), [("1", "option"), ("2", "setting"), ("1", "default")]
    )
    def test_metrics_are_served_where_asked_only(
        self,
        fw: Forwarder,
        standin: Airflow2StandIn,
        tmp_path: Path,
        concurrency: str,
        how: str,
    ) -> None:
        """--metrics-host (or FIVETRAN_EVENTS_METRICS_HOST) picks the address, for a lone
        worker and a pool alike; by default it is 127.0.0.1 and nothing else."""
        port = free_port()
        args = ["--concurrency", concurrency, "--metrics-port", str(port)]
        extra: dict[str, Any] = {}
        if how == "option":
            args += ["--metrics-host", OTHER_LOOPBACK]
        elif how == "setting":
            extra["metrics_host"] = OTHER_LOOPBACK
        served, other = (
            ("127.0.0.1", OTHER_LOOPBACK) if how == "default" else (OTHER_LOOPBACK, "127.0.0.1")
        )
        with WorkerProcess(fw.settings, tmp_path, args=tuple(args), **extra) as worker:

            def answers() -> bool:
                try:
                    return requests.get(f"http://{served}:{port}/metrics", timeout=2).ok
                except requests.ConnectionError:
                    return False

            poll_until(answers, f"metrics on {served}:{port}", 30, details=worker.log)
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((other, port), timeout=2).close()

    def test_a_bad_host_is_a_clear_error(self, fw: Forwarder) -> None:
        exe = Path(sys.executable).parent / "fivetran-events"
        run = subprocess.run(
            [str(exe), "worker", "--metrics-host", "a b", "--metrics-port", "9"],
            env=worker_env(fw.settings),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 2, run.stderr
        assert "metrics_host" in run.stderr.lower() and len(run.stderr.splitlines()) == 1
