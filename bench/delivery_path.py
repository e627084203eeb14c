"""Follow one delivery through the code: the files it crosses, and how often it comes back.

A signed ``sync_end`` is POSTed to the webhook app (Flask's test client), the worker's
sweeper queues its delivery and a worker in burst mode posts it to an Airflow stand-in
(3.3's REST API, on loopback). A profiler notes, at every Python call, which production
file (``fivetran_events/``, ``webhook_app/``) the delivery enters: the innermost frame of
ours on the stack. It prints the files crossed and the returns, a return being an entry
into a file the delivery had already left (a call back into it, or onward into it
again). Fewer of both is a path a newcomer can follow.
Run: ``python -m bench.delivery_path [--show]``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fivetran_events import Settings  # noqa: E402 (after the path insertion)
from testkit.airflow2_standin import running_airflow2_standin  # noqa: E402
from testkit.own_redis import own_redis  # noqa: E402
from testkit.support import OTHER_SECRET, SECRET, TOKEN, deliver, payload  # noqa: E402

PRODUCTION = tuple(str(ROOT / p) + "/" for p in ("fivetran_events", "webhook_app"))
URI = "fivetran://connector/assimilate_seem"


class Trail:
    """The sequence of production files the traced code runs in, consecutive repeats folded."""

    def __init__(self) -> None:
        self.files: list[str] = []

    def _ours(self, frame: FrameType | None) -> str | None:
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(PRODUCTION):
                return name[len(str(ROOT)) + 1 :]
            frame = frame.f_back
        return None

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        here = self._ours(frame)
        if here is not None and (not self.files or self.files[-1] != here):
            self.files.append(here)

    def trace(self, fn: Any, *args: Any) -> Any:
        sys.setprofile(self.profile)
        try:
            return fn(*args)
        finally:
            sys.setprofile(None)

    def returns(self) -> int:
        seen: set[str] = set()
        n = 0
        for f in self.files:
            n += f in seen
            seen.add(f)
        return n


def measure(show: bool) -> None:
    from testkit.forward_support import forwarder, run_worker
    from webhook_app import create_app

    with (
        tempfile.TemporaryDirectory(prefix="bench-path-") as tmp,
        own_redis(Path(tmp)) as server,
        running_airflow2_standin("3.3.2") as airflow,
    ):
        airflow.add_dataset(URI, dags=("consumer",))
        settings = Settings(
            redis_url=server.url,
            webhook_secrets=[SECRET, OTHER_SECRET],
            api_tokens=[TOKEN],
            key_prefix="bench:",
            airflow_url=airflow.url,
        )
        fw = forwarder(settings, airflow.url, airflow.username, airflow.password)
        path = Trail()
        with create_app(settings).test_client() as http:
            # One delivery first, untraced: imports and first-use caches are not the path.
            deliver(http, payload(sync_id="warm-up"))
            run_worker(fw)
            path.trace(deliver, http, payload(sync_id="traced"))
        path.trace(run_worker, fw)
        posted = [e for e in airflow.events if e["extra"]["sync_id"] == "traced"]
        if len(posted) != 1:
            raise SystemExit(f"the traced delivery reached Airflow {len(posted)} times, not once")
    if show:
        print("\n".join(path.files))
    print(f"files crossed: {len(set(path.files))}")
    print(f"entries into a file already left: {path.returns()}")
    print(f"file changes in all: {len(path.files) - 1}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="print the path, file by file")
    logging.disable(logging.INFO)  # the worker's and stand-in's lines are not the figures
    measure(parser.parse_args().show)


if __name__ == "__main__":
    main()
