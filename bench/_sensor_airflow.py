"""What the real-Airflow sensor benchmarks share: an Airflow 3 with its redis-server, waits.

``bench/sensor_scale.py`` (``--scale``) and ``bench/sensor_backfill.py``
(``--backfill-cost``) both start their Airflow here; neither imports the other's module
for it, so the two stay free of an import cycle.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import timezone
from pathlib import Path
from typing import TypeVar

from bench._servers import start_redis, stop_group
from testkit.airflow_harness import AirflowServer
from testkit.support import conn_uri

T = TypeVar("T")
UTC = timezone.utc
PREFIX = "bench:"
#: LocalExecutor's parallelism here: each deferral needs its task to start once in a
#: task process; more than a few at once only queue on 2 cores.
PARALLELISM = 4


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def wait(what: str, check: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
    """Poll ``check()`` until truthy; exit the benchmark with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


@contextmanager
def airflow_with_redis(work: Path, capacity: int) -> Iterator[tuple[AirflowServer, str]]:
    """A redis-server and a real Airflow reading the history from it; both stopped after."""
    rproc, url = start_redis(work, appendonly=False)
    with ExitStack() as stack:
        stack.callback(stop_group, rproc, 10)
        airflow = AirflowServer(
            home=work / "airflow",
            triggerer_capacity=capacity,
            extra_env={
                "AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS": conn_uri(url, PREFIX),
                "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
            },
        )
        stack.callback(airflow.stop)
        t = time.monotonic()
        airflow.prepare()
        airflow.start()
        print(f"   (Airflow 3 started in {time.monotonic() - t:.0f} s)")
        yield airflow, url
