"""Run ``fivetran-events worker`` as a real process, stopped or killed by its PID."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from fivetran_events import Settings

from .processes import stop_group


def worker_env(settings: Settings, **extra: Any) -> dict[str, str]:
    """The environment a worker needs to reach the test Redis and Airflow."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIVETRAN_EVENTS_")}
    values = {
        "REDIS_URL": settings.redis_url,
        "KEY_PREFIX": settings.key_prefix,
        "AIRFLOW_URL": settings.airflow_url,
        "AIRFLOW_USERNAME": settings.airflow_username,
        "AIRFLOW_PASSWORD": (
            settings.airflow_password.get_secret_value() if settings.airflow_password else None
        ),
        **{k.upper(): v for k, v in extra.items()},
    }
    env.update({f"FIVETRAN_EVENTS_{k}": str(v) for k, v in values.items() if v is not None})
    return env


class WorkerProcess:
    """One ``fivetran-events worker`` (a pool by default): ``stop()`` SIGTERM, ``kill()`` -9."""

    def __init__(
        self,
        settings: Settings,
        log_dir: Path,
        name: str = "worker",
        *,
        args: tuple[str, ...] = (),
        environ: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        """``extra``: FIVETRAN_EVENTS_* settings; ``environ``: other variables as given
        (e.g. OPENLINEAGE_URL)."""
        self.log_path = log_dir / f"{name}.log"
        exe = Path(sys.executable).parent / "fivetran-events"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(exe), "worker", "--sweep-interval", "0.2", *args],
                env={**worker_env(settings, **extra), **(environ or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def members(self) -> list[int]:
        """The PIDs of its pool's worker processes (none with ``--concurrency 1``)."""
        try:
            return [
                int(p)
                for p in Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
            ]
        except FileNotFoundError:
            return []

    def kill(self) -> None:
        """SIGKILL it and every member of its pool at once, as if its host died."""
        for pid in self.members():  # first: the pool would start new ones
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stop_group(self.proc, timeout=10, sig=signal.SIGKILL)

    def stop(self) -> None:
        stop_group(self.proc, timeout=15)

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop it however the test ends (a failed wait must not leave a worker behind)."""
        self.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]
