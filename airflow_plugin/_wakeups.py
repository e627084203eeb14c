"""Shared Redis resources of the triggerer: one pub/sub listener, one small pool.

A triggerer may hold thousands of deferred sensors. Each owning a Redis subscription
(one socket each) and a connection pool would cost thousands of sockets, so all
triggers of one event loop that read the same Redis share one ``Hub``: a single
PSUBSCRIBE on ``{prefix}changes:*`` (the webhook server publishes there inside every
history write) wakes the triggers of the connector named in the channel, and a bounded
pool serves their reads. The hub closes itself when its last trigger leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from typing import Any

import redis

from fivetran_events.keys import changes_pattern
from fivetran_events.redis_url import async_client_from_url

log = logging.getLogger(__name__)

#: Connections the shared pool may open; reads beyond that queue for a free one.
POOL_SIZE = 16
#: Seconds between attempts to re-subscribe after the listener lost Redis.
RECONNECT_DELAY = 1.0

_hubs: dict[tuple[int, str, str], Hub] = {}


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
        """Return an event set whenever ``connector_id`` changes (or the listener loses or
        regains Redis)."""
        event = asyncio.Event()
        self._waiters[connector_id].add(event)
        self._count += 1
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen())
        return event

    async def subscribed(self, timeout: float) -> None:
        """Wait until the subscription is active (a publish before it would be missed)."""
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
        pattern = changes_pattern(self.prefix)
        channel_prefix = pattern[:-1]
        while True:
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.psubscribe(pattern)
                self._subscribed.set()
                # Whatever was published while we were not listening is lost: re-check all.
                self._wake(None)
                while True:
                    msg = await pubsub.get_message(timeout=30.0)
                    if msg is None or msg.get("type") != "pmessage":
                        continue
                    channel = msg["channel"]
                    if isinstance(channel, bytes):
                        channel = channel.decode()
                    self.messages += 1
                    self._wake(channel[len(channel_prefix) :])
            except asyncio.CancelledError:
                raise
            except (redis.RedisError, OSError) as exc:
                # Losing Redis wakes every trigger too: each then reads, meets the outage
                # and starts its retry window now, rather than at its next re-check, so a
                # deferred sensor learns of an outage as soon as a poking one would.
                if self._subscribed.is_set():
                    self._wake(None)
                self._subscribed.clear()
                log.warning(
                    "change listener lost Redis (%s); triggers fall back to their "
                    "re-check interval until it is back",
                    exc,
                )
                await asyncio.sleep(RECONNECT_DELAY)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()


def hub_for(url: str, prefix: str, redis_kwargs: dict[str, Any]) -> Hub:
    """Return the hub of the running loop for ``url`` and ``prefix``, creating it once."""
    key = (id(asyncio.get_running_loop()), url, prefix)
    hub = _hubs.get(key)
    if hub is None:
        hub = _hubs[key] = Hub(url, prefix, redis_kwargs)
    return hub
