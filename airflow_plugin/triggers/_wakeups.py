"""The triggerer's shared Redis resources: one pub/sub listener, one small pool.

Thousands of deferred sensors each owning a subscription and a pool would cost thousands
of sockets, so the triggers of one event loop that read one Redis share a ``Hub``: one
PSUBSCRIBE on ``{prefix}changes:*`` wakes the triggers of the connector in the channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import redis

from fivetran_events import as_text
from fivetran_events.keys import changes_pattern
from fivetran_events.redis_url import async_client_from_url

log = logging.getLogger(__name__)

#: Connections the shared pool may open; reads beyond that queue for a free one.
POOL_SIZE = 16
#: Seconds between attempts to re-subscribe after the subscription lost Redis.
RECONNECT_DELAY = 1.0
#: Longest wait for a message: how soon a lost cancel is seen while nothing is published.
MESSAGE_WAIT = 5.0

_hubs: dict[tuple[int, str, str], Hub] = {}


def stop_if_cancelled() -> None:
    """Raise ``CancelledError`` when this task was cancelled but the cancel got lost (a
    cancel during a Redis read can be swallowed below us, and Airflow cancels a trigger
    once); ``Task.cancelling()`` still counts it (Python 3.11+)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling() > 0:
        raise asyncio.CancelledError


@dataclass(frozen=True)
class Change:
    """One item of ``changes()``: re-read ``connector_id``'s history, or everyone's (None);
    ``"subscribed"`` follows every (re)subscribe: what was published meanwhile is lost."""

    connector_id: str | None
    reason: Literal["message", "subscribed", "tick", "lost"]
    error: Exception | None = None


async def changes(client: Any, prefix: str, tick: float | None = None) -> AsyncIterator[Change]:
    """Yield the history's changes for ever; a Redis error yields ``lost``, then resubscribes."""
    pattern = changes_pattern(prefix)
    channel_prefix = pattern[:-1]
    while True:
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.psubscribe(pattern)
            yield Change(None, "subscribed")
            next_tick = time.monotonic() + tick if tick else math.inf
            while True:
                wait = min(MESSAGE_WAIT, max(0.0, next_tick - time.monotonic()))
                msg = await pubsub.get_message(timeout=wait)
                stop_if_cancelled()
                if msg is not None and msg.get("type") == "pmessage":
                    yield Change(as_text(msg["channel"])[len(channel_prefix) :], "message")
                if tick and time.monotonic() >= next_tick:
                    yield Change(None, "tick")
                    next_tick = time.monotonic() + tick
        except (redis.RedisError, OSError) as exc:
            stop_if_cancelled()  # a cancel may arrive as a Redis error: the caller waits
            yield Change(None, "lost", exc)
            await asyncio.sleep(RECONNECT_DELAY)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()


class Hub:
    """One listener and one pool for every trigger of a loop reading one Redis."""

    def __init__(self, url: str, prefix: str, redis_kwargs: dict[str, Any]) -> None:
        self.url = url
        self.prefix = prefix
        # Behind Sentinel each new connection asks for the primary: a re-subscribe after
        # a failover reaches the new one.
        self.client = async_client_from_url(url, max_connections=POOL_SIZE, **redis_kwargs)
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._count = 0
        self._subscribed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Messages received (tests and the benchmark read it).
        self.messages = 0

    def register(self, connector_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._waiters[connector_id].add(event)
        self._count += 1
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen())
        return event

    async def subscribed(self, timeout: float) -> None:
        """Wait until subscribed (a publish before that would be missed)."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), timeout)

    async def unregister(self, connector_id: str, event: asyncio.Event) -> None:
        waiters = self._waiters.get(connector_id)
        if waiters is not None:
            waiters.discard(event)
            if not waiters:
                del self._waiters[connector_id]
        self._count -= 1
        if self._count <= 0:
            await self.close()

    async def close(self) -> None:
        for key, hub in list(_hubs.items()):
            if hub is self:
                del _hubs[key]
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        await self.client.aclose()

    def _wake(self, connector_id: str | None) -> None:
        if connector_id is None:
            groups = list(self._waiters.values())
        else:
            groups = [self._waiters.get(connector_id, set())]
        for waiters in groups:
            for event in waiters:
                event.set()

    async def _listen(self) -> None:
        async for change in changes(self.client, self.prefix):
            if change.reason == "message":
                self.messages += 1
                self._wake(change.connector_id)
            elif change.reason == "subscribed":
                self._subscribed.set()
                self._wake(None)  # what was published while we were not listening is lost
            elif change.reason == "lost":
                # Losing Redis wakes every trigger too: each then reads, meets the outage
                # and starts its retry window now, rather than at its next re-check, so a
                # deferred sensor learns of an outage as soon as a poking one would.
                if self._subscribed.is_set():
                    self._wake(None)
                self._subscribed.clear()
                log.warning(
                    "change listener lost Redis (%s); triggers fall back to their "
                    "re-check interval until it is back",
                    change.error,
                )


def hub_for(url: str, prefix: str, redis_kwargs: dict[str, Any]) -> Hub:
    """Return the hub of the running loop for ``url`` and ``prefix``, creating it once."""
    key = (id(asyncio.get_running_loop()), url, prefix)
    hub = _hubs.get(key)
    if hub is None:
        hub = _hubs[key] = Hub(url, prefix, redis_kwargs)
    return hub


async def changed_within(changed: asyncio.Event, seconds: float) -> bool:
    """Wait until ``changed`` is set or ``seconds`` pass; return whether it was set. Not
    ``asyncio.wait_for``: Python 3.11's drops a cancel that lands with the timeout."""

    due = False

    def time_up() -> None:
        nonlocal due
        due = True
        changed.set()

    timer = asyncio.get_running_loop().call_later(seconds, time_up)
    try:
        await changed.wait()
    finally:
        timer.cancel()
    return not due
