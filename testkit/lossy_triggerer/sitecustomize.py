"""A triggerer whose database loses chosen trigger events, loaded only where a test asks.

A test puts this folder on ``PYTHONPATH`` for one ``airflow triggerer`` it starts (never
for the other components). When that triggerer's supervisor imports
``airflow.jobs.triggerer_job_runner``, ``TriggerRunnerSupervisor.handle_events`` is
wrapped: an event whose payload's ``sync_id`` is listed in the file ``FTE_LOSE_EVENTS``
(one id a line) is dropped once, neither persisted nor confirmed, and the id appended to
``FTE_LOST_EVENTS``. The triggerer lives on: this is "the persist failed" of Airflow's
shared-stream docstring, which its ack timeout reports to ``advance()`` as a failed
event that deserves redelivery (stock 3.3.2 instead ends the triggerer when
``submit_event`` raises, which restarts every watcher and hides the case).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

TARGET = "airflow.jobs.triggerer_job_runner"


def _lose(entry: Any) -> bool:
    """Whether to drop this outbound event (listed, and not dropped before)."""
    payload = getattr(getattr(entry, "event", None), "payload", None)
    sync_id = payload.get("sync_id") if isinstance(payload, dict) else None
    listed = Path(os.environ["FTE_LOSE_EVENTS"])
    lost = Path(os.environ["FTE_LOST_EVENTS"])
    if not sync_id or not listed.exists():
        return False
    done = lost.read_text().split() if lost.exists() else []
    if sync_id not in listed.read_text().split() or sync_id in done:
        return False
    with lost.open("a") as f:
        f.write(f"{sync_id}\n")
    return True


def _patch(module: ModuleType) -> None:
    supervisor = module.TriggerRunnerSupervisor
    original = supervisor.handle_events

    def handle_events(self: Any) -> None:
        kept = [e for e in self.events if not _lose(e)]
        self.events.clear()
        self.events.extend(kept)
        original(self)

    supervisor.handle_events = handle_events


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patch the triggerer's module as it is imported (importing Airflow here is too early)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch
        return spec


if "FTE_LOSE_EVENTS" in os.environ:
    sys.meta_path.insert(0, _PatchOnImport())
