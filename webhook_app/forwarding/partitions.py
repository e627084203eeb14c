"""A sync's partitions delivery, expanded into one asset delivery per (URI, partition key).

The webhook creates one delivery per success however many periods it completed; its attempt
reads the history once (the success and the one before), asks ``fivetran_events.partitions``
which periods it completed, and creates an ASSET delivery per (URI, key) in one MULTI (run
again, only what is missing). Each carries its key: posted once per (sync, key, URI).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from redis.client import Pipeline

from fivetran_events import HistoryReader
from fivetran_events.decision import Criterion
from fivetran_events.deliveries import Delivery, DeliveryKind, DeliveryState, Field, SyncRef
from fivetran_events.partitions import Completed, completed_by

from .. import metrics
from ..airflow_client import AirflowClient
from ..exceptions import AirflowRejected, AirflowUnavailable
from .enqueue import Enqueuer
from .recorder import AttemptResult, Recorder, retry_at
from .sweeper import Sweeper

log = logging.getLogger(__name__)


class Partitioner:
    """Which partitions a sync completed, and their deliveries (here and per table)."""

    def __init__(
        self, recorder: Recorder, airflow: AirflowClient | None, enqueuer: Enqueuer
    ) -> None:
        """Without ``airflow``: ``completed`` and ``create`` only (``replay --partitions``)."""
        self.recorder = recorder
        self.airflow = airflow
        self.enqueuer = enqueuer
        self._allowed = False

    def refused(self) -> str | None:
        """Why Airflow takes no partition keys (None: it does; asked once per process)."""
        if self._allowed:
            return None
        assert self.airflow is not None
        refusal = self.airflow.partitions_refused()
        self._allowed = refusal is None
        return refusal

    def completed(self, sync: SyncRef) -> Completed:
        s = self.recorder.settings
        assert s.partition_grain is not None
        reader = HistoryReader(self.recorder.redis, s.key_prefix, s.max_sync_duration_ms)
        mine, previous = reader.success_and_previous(sync.connector_id, sync.sync_id, sync.ended_ms)
        if mine is None:  # trimmed by retention since: it completes nothing any more
            return Completed(())
        done = completed_by(
            mine,
            previous,
            s.partition_grain,
            Criterion(s.partition_criterion),
            s.partition_max_keys,
        )
        if done.skipped:
            metrics.PARTITIONS_SKIPPED.inc(done.skipped)
            log.warning(
                "connector %s sync %s: completed %d more %ss than FIVETRAN_EVENTS_PARTITION_"
                "MAX_KEYS allows; %s to %s are not posted (replay --partitions posts them)",
                sync.connector_id,
                sync.sync_id,
                done.skipped,
                s.partition_grain,
                done.skipped_from,
                done.skipped_to,
            )
        return done

    def create(
        self,
        pipe: Pipeline,
        sync: SyncRef,
        keys: tuple[str, ...],
        uris: list[str],
        extras: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Queue in ``pipe`` a delivery per (URI, key), each kept if it exists; ``extras``:
        an ``extra`` per URI (a table's), else the sync's is read when it is posted."""
        ids: list[str] = []
        now = self.recorder.clock()
        targets = [(u, DeliveryKind.ASSET) for u in uris]
        for key in keys:
            store = self.recorder.store
            ids += store.create(sync, targets, now, pipe, partition_key=key, extras=extras)
        return ids


class PartitionsSender:
    """Expand a sync's partitions delivery into one asset delivery per (URI, key)."""

    def __init__(self, partitioner: Partitioner, sweeper: Sweeper) -> None:
        self.partitioner = partitioner
        self.recorder = partitioner.recorder
        self.sweeper = sweeper

    def not_before(self, d: Delivery) -> int | None:
        return retry_at(d)

    def send(self, d: Delivery) -> AttemptResult:
        r, p = self.recorder, self.partitioner
        try:
            refusal = p.refused()
        except AirflowUnavailable as exc:
            return r.retry(d, exc)
        except AirflowRejected as exc:
            return r.give_up(d, DeliveryState.FAILED, str(exc))
        if refusal is not None:
            return r.give_up(d, DeliveryState.FAILED, refusal)
        sync = SyncRef.from_fields(d.fields)
        done = p.completed(sync)
        uris = p.enqueuer.uri_map.uris(
            sync.connector_id, sync.connector_name, sync.connector_type, sync.group_id
        )
        with r.redis.pipeline(transaction=True) as pipe:
            p.create(pipe, sync, done.keys, uris)
            pipe.execute()
        fields = {
            Field.PARTITIONS: json.dumps(list(done.keys)),
            Field.PARTITIONS_SKIPPED: str(done.skipped),
        }
        span = f"{done.keys[0]} to {done.keys[-1]}" if done.keys else "none"
        note = f"{len(done.keys)} partitions ({span}) x {len(uris)} URIs, forwarded" + (
            f"; {done.skipped} older ones over the cap not posted" if done.skipped else ""
        )
        result = r.delivered(d, fields, note, reason=f"partitions {len(done.keys)}")
        self.sweeper.sweep_backlog()  # this worker is awake already
        return result
