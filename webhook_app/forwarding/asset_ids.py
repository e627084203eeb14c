"""Airflow's asset ids shared through Redis by a worker pool's processes.

Each ``fivetran-events worker`` process has its own Airflow client; without sharing,
each one's first delivery to a URI (and each one's again when its cache runs out) asks
Airflow for the id. With it, one process's lookup serves the pool for the cache period
(``AirflowClient.asset_cache_seconds``), so Airflow sees one lookup per URI and period.
"""

from __future__ import annotations

import redis

from fivetran_events.keys import asset_id_key


class RedisAssetIds:
    """``airflow_client.SharedAssetIds`` in Redis: one string per URI, with an expiry."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix

    def get(self, uri: str) -> int | None:
        raw = self.redis.get(asset_id_key(self.prefix, uri))
        try:
            return int(raw) if raw is not None else None
        except ValueError:  # not ours to trust: look it up again
            return None

    def put(self, uri: str, asset_id: int, ttl_s: float) -> None:
        self.redis.set(asset_id_key(self.prefix, uri), str(asset_id), px=max(1, int(ttl_s * 1000)))

    def drop(self, uri: str) -> None:
        self.redis.delete(asset_id_key(self.prefix, uri))
