"""Waiting and stopping, once for the tests and the benchmarks: poll, free ports, groups.

Every wait in the suite is a poll with a deadline (never a fixed sleep that hopes the
thing happened), and every process a test starts is stopped by its own PID or process
group, never by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def poll_until(
    check: Callable[[], T | None],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.1,
    details: Callable[[], str] | None = None,
    progress: Callable[[], object] | None = None,
) -> T:
    """Return ``check()``'s first truthy value; raise ``TimeoutError`` naming ``what``.

    ``check`` returns the thing waited for, or something falsy (None, False, "", [])
    while it is not there yet; it may raise to end the wait early (a process it depends
    on died). ``details`` adds what helps diagnose a timeout (a log's tail) to the error.
    With ``progress``, ``timeout`` counts from the last change of its value (a machine
    that is slow but moving is waited for, one that is stuck is not), up to four times
    ``timeout`` in all.
    """
    start = time.monotonic()
    deadline = start + timeout
    last = progress() if progress is not None else None
    while True:
        value = check()
        if value:
            return value
        if progress is not None and (seen := progress()) != last:
            last, deadline = seen, min(time.monotonic() + timeout, start + 4 * timeout)
        if time.monotonic() >= deadline:
            extra = f"\n{details()}" if details is not None else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


def stop_group(
    proc: subprocess.Popen[Any], timeout: float = 20.0, sig: int = signal.SIGTERM
) -> None:
    """Stop a child started with ``start_new_session=True``: ``sig``, then SIGKILL.

    The child leads a session of its own, so its group is it and the children it forked
    (gunicorn or uvicorn workers, task supervisors), and nothing else. Children that
    outlive their leader get SIGKILL too.
    """
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
