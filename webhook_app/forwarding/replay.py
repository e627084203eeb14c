"""Replay, for the operator (``fivetran-events replay``): give deliveries a new retry window, or
create the deliveries of past successes, through the store's transitions (``replay``,
``create``); delivered ones are left alone, so a replay never makes a second event."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fivetran_events import Event, HistoryReader, Settings
from fivetran_events.decision import Criterion
from fivetran_events.deliveries import SyncRef
from fivetran_events.model import EventKind
from fivetran_events.partitions import completed_by, key_start_ms
from fivetran_events.timeutil import from_ms, now_ms

from .enqueue import Enqueuer, sync_of
from .partitions import Partitioner
from .store import DeliveryStore, target_id

if TYPE_CHECKING:
    from .forwarder import Forwarder


@dataclass
class PartitionReplay:
    """What ``replay --partitions`` queued: ids created and replayed, how many were
    delivered already, and each connector's keys."""

    created: list[str] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    delivered: int = 0
    keys: dict[str, list[str]] = field(default_factory=dict)


class Replayer:
    """Replay deliveries and forward past successes, through the store's transitions."""

    def __init__(
        self,
        settings: Settings,
        store: DeliveryStore,
        enqueuer: Enqueuer,
        partitioner: Partitioner | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.settings = settings
        self.store = store
        self.enqueuer = enqueuer
        #: With FIVETRAN_EVENTS_PARTITION_GRAIN (``replay --partitions``).
        self.partitioner = partitioner
        self.clock = clock

    @classmethod
    def of(cls, fw: Forwarder) -> Replayer:
        """The replayer of a forwarder's store, targets and partitions, on its clock."""
        return cls(fw.settings, fw.store, fw.enqueuer, fw.partitioner, lambda: fw.recorder.clock())

    def _reader(self) -> HistoryReader:
        s = self.settings
        return HistoryReader(self.store.client, s.key_prefix, s.max_sync_duration_ms)

    def replay(self, ids: Iterable[str]) -> list[str]:
        """Give given-up (or stuck) deliveries a new window, due now; return those replayed."""
        return [did for did in ids if self.store.replay(did, self.clock())]

    def deliveries_of_sync(self, sync_id: str, connector_id: str | None = None) -> list[str]:
        """Return the delivery ids of ``sync_id`` (of any connector unless one is named)."""
        return [
            i
            for i in self.store.listed()
            if i.split(":")[1] == sync_id
            and (connector_id is None or i.split(":")[0] == connector_id)
        ]

    def forward_since(self, since_ms: int) -> tuple[list[str], list[str], int]:
        """Forward every success ended at or after ``since_ms`` (``replay --since``): create missing
        deliveries (forwarding was off), replay undelivered ones; (created, replayed, delivered)."""
        now = self.clock()
        created: list[str] = []
        existing: list[str] = []
        reader = self._reader()
        for rec in reader.connector_records():
            for c in reader.successes_since(rec.connector_id, since_ms):
                event = Event(
                    kind=EventKind.SYNC_END,
                    event="sync_end",
                    created=from_ms(c.ended_ms),
                    connector_id=rec.connector_id,
                    connector_name=rec.name,
                    connector_type=rec.type,
                    group_id=rec.group,
                    sync_id=c.sync_id,
                    status=c.status,
                )
                sync = sync_of(event)
                for target in self.enqueuer.targets(event):
                    did = target_id(sync, target[0])
                    if self.store.exists(did):
                        existing.append(did)
                        continue
                    created += self.store.create(sync, [target], now)
        replayed = self.replay(existing)
        return created, replayed, len(existing) - len(replayed)

    def forward_partitions_since(self, since_ms: int) -> PartitionReplay:
        """Create the partitioned deliveries of every period starting at or after ``since_ms``
        that a success since then completed, on each connector's assets (``replay --partitions``);
        replay given-up ones, leave delivered ones. One success completes a period: no cap."""
        p = self.partitioner
        s = self.settings
        assert p is not None and s.partition_grain is not None
        out = PartitionReplay()
        reader = self._reader()
        criterion = Criterion(s.partition_criterion)
        existing: list[str] = []
        client = self.store.client
        for rec in reader.connector_records():
            cid = rec.connector_id
            if s.asset_granularity == "table":
                continue  # a table's assets are known to the worker's expansion only
            uris = self.enqueuer.uri_map.uris(cid, rec.name, rec.type, rec.group)
            previous = reader.last_success(cid, f"({since_ms}")
            for c in reader.successes_since(cid, since_ms):
                done = completed_by(c, previous, s.partition_grain, criterion, cap=1 << 31)
                previous = c
                keys = tuple(k for k in done.keys if key_start_ms(k) >= since_ms)
                sync = SyncRef.from_record(rec, c.sync_id, c.ended_ms)
                with client.pipeline(transaction=True) as pipe:
                    for k in keys:
                        ids = {target_id(sync, u, k): u for u in uris}
                        have = [i for i in ids if self.store.exists(i)]
                        existing += have
                        missing = [u for i, u in ids.items() if i not in have]
                        out.created += p.create(pipe, sync, (k,), missing) if missing else []
                    pipe.execute()
                if keys:
                    out.keys.setdefault(cid, []).extend(keys)
        out.replayed = self.replay(existing)
        out.delivered = len(existing) - len(out.replayed)
        return out
