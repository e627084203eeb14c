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

from fivetran_events import WriteStatus
from fivetran_events.keys import readiness_key
from fivetran_events.timeutil import now_ms

from .errors import ApiError
from .state import State

#: Life of the marker written before WAIT (the readiness probe's key, overwritten).
MARK_TTL_MS = 60_000


def confirm_replicas(st: State, status: WriteStatus) -> None:
    """Return once enough replicas hold the delivery just handled; raise 503 otherwise.

    A duplicate waits too: its first delivery may have been answered 503 before the
    replicas had it.
    """
    if status is WriteStatus.IGNORED:
        return
    short = missing_replicas(st)
    if short is not None:
        raise ApiError(503, f"recorded, but {short}; retry later")


def missing_replicas(st: State) -> str | None:
    """Write a marker and WAIT for it; say how many replicas fell short, or None.

    WAIT counts the writes of the connection that sends it, and a pooled client may hand
    out another connection than the one that wrote the history; so one write of our own
    goes first on the connection that sends WAIT. Replicas apply the primary's stream in
    order: a replica that confirms the marker holds every write before it. /readyz asks
    the same, so a webhook that would answer every delivery 503 is not ready.
    """
    wanted = st.settings.redis_wait_replicas
    if wanted == 0:
        return None
    timeout_ms = st.settings.redis_wait_timeout_ms
    pipe = st.redis.pipeline(transaction=False)
    pipe.set(readiness_key(st.settings.key_prefix), now_ms(), px=MARK_TTL_MS)
    pipe.wait(wanted, timeout_ms)
    confirmed = int(pipe.execute()[-1])
    if confirmed >= wanted:
        return None
    return (
        f"only {confirmed} of {wanted} Redis replicas confirmed it within {timeout_ms} ms "
        "(FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS)"
    )
