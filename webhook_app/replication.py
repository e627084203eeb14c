"""Wait for replicas before acknowledging a delivery (``FIVETRAN_EVENTS_REDIS_WAIT_*``).

Redis replicates asynchronously: a delivery acknowledged once it is on the primary is
lost if the primary dies before a replica has it and Sentinel promotes that replica.
With ``redis_wait_replicas`` = n > 0 the webhook answers 2xx only after n replicas
confirmed the write (Redis ``WAIT``), else 503 so that Fivetran delivers again: the
redelivery is a duplicate if the write survived and is recorded anew if it was lost.
This narrows the window; it is not consensus (WAIT does not make Redis strongly
consistent: a failover may still promote a replica that had not confirmed).
"""

from __future__ import annotations

from fivetran_events import Event, WriteStatus
from fivetran_events.keys import ConnectorKeys, readiness_key
from fivetran_events.timeutil import now_ms

from .errors import ApiError
from .state import State

#: Life of the marker written before WAIT (the readiness probe's key, overwritten).
MARK_TTL_MS = 60_000


def confirm_replicas(st: State, event: Event, status: WriteStatus) -> None:
    """Return once enough replicas hold the delivery just handled; raise 503 otherwise.

    A duplicate waits too: its first delivery may have been answered 503 before the
    replicas had it.
    """
    if status is WriteStatus.IGNORED or st.settings.redis_wait_replicas == 0:
        return  # the common case: nothing to build on the webhook's path
    seen = (ConnectorKeys(st.settings.key_prefix, event.connector_id).seen, event.dedup_id)
    short = missing_replicas(st, seen)
    if short is not None:
        raise ApiError(503, f"recorded, but {short}; retry later")


def missing_replicas(st: State, seen: tuple[str, str] | None = None) -> str | None:
    """Write a marker and WAIT for it; say how many replicas fell short, or None.

    WAIT counts the writes of the connection that sends it, and a pooled client may hand
    out another connection than the one that wrote the history; so one write of our own
    goes first on the connection that sends WAIT. Replicas apply the primary's stream in
    order: a replica that confirms the marker holds every write before it. ``seen`` (a
    connector's dedup set and a delivery's id) is read first on the same connection: a
    failover between the history's write and this round trip would otherwise have the
    new primary's replicas confirm a marker without the delivery. /readyz asks without
    it, so a webhook that would answer every delivery 503 is not ready.
    """
    wanted = st.settings.redis_wait_replicas
    if wanted == 0:
        return None
    timeout_ms = st.settings.redis_wait_timeout_ms
    pipe = st.redis.pipeline(transaction=False)
    if seen is not None:
        pipe.zscore(*seen)
    pipe.set(readiness_key(st.settings.key_prefix), now_ms(), px=MARK_TTL_MS)
    pipe.wait(wanted, timeout_ms)
    replies = pipe.execute()
    if seen is not None and replies[0] is None:
        return "the Redis primary answering now does not hold it (a failover?)"
    confirmed = int(replies[-1])
    if confirmed >= wanted:
        return None
    return (
        f"only {confirmed} of {wanted} Redis replicas confirmed it within {timeout_ms} ms "
        "(FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS)"
    )
