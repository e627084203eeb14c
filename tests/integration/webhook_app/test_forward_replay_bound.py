"""A captured signed success, replayed at any age, is forwarded to Airflow once.

Fivetran signs no timestamp, so replay protection is deduplication; the dedup marks are
trimmed RECENT_MS behind a connector's newest event while the webhook accepts events up
to the history's retention. The history itself is what says "already known". Real
redis-server, the real Flask app and worker jobs; Airflow 2 is the stand-in.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis

from fivetran_events import HistoryReader, Settings
from fivetran_events.deliveries import DeliveryState
from fivetran_events.keys import ConnectorKeys, deliveries_key, due_key, sync_deliveries_key
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import CID, run_worker
from testkit.support import deliver, payload
from webhook_app.forwarding.forwarder import Forwarder

pytestmark = pytest.mark.timeout(60)


def forget_forwarding(client: redis.Redis, prefix: str, sync_id: str) -> None:
    """What time does to a delivered sync: its dedup marks trimmed, its delivered record
    (and its sync's set and listing entry) expired."""
    client.delete(ConnectorKeys(prefix, CID).seen)
    for key in client.scan_iter(f"{prefix}fwd:d:{CID}:{sync_id}:*"):
        client.delete(key)
    client.delete(sync_deliveries_key(prefix, CID, sync_id))
    client.delete(deliveries_key(prefix))


class TestBoundedReplay:
    def test_a_replayed_success_of_a_known_sync_creates_no_delivery(
        self, http: Any, fw: Forwarder, client: redis.Redis, standin: Airflow2StandIn
    ) -> None:
        """The same signed body, after its marks are trimmed and its record expired,
        is a duplicate: nothing is queued and Airflow gets no second event."""
        p = fw.settings.key_prefix
        body = payload(sync_id="s1")
        assert deliver(http, body)["status"] == "recorded"
        run_worker(fw)
        assert len(standin.posts) == 1
        forget_forwarding(client, p, "s1")

        again = deliver(http, body)
        assert not list(client.scan_iter(f"{p}fwd:d:*"))
        assert client.zcard(due_key(p)) == 0
        run_worker(fw)
        assert len(standin.posts) == 1
        assert again["status"] == "duplicate"

    def test_an_old_success_not_in_the_history_is_recorded_and_forwarded_once(
        self,
        http: Any,
        fw: Forwarder,
        client: redis.Redis,
        settings: Settings,
        standin: Airflow2StandIn,
    ) -> None:
        """Ten days old (past the dedup window, inside the retention), never seen: the
        sensor may need it, so it is recorded and forwarded; its replay is not."""
        p = fw.settings.key_prefix
        # A newer event first, so the old one's dedup mark is behind the newest one's.
        deliver(http, payload(sync_id="new"))
        old = datetime.now(timezone.utc) - timedelta(days=10)
        body = payload(sync_id="old", created=old)
        assert deliver(http, body)["status"] == "recorded"
        reader = HistoryReader(client, p, settings.max_sync_duration_ms)
        assert [c.sync_id for c in reader.successes_since(CID, 0)] == ["old", "new"]
        run_worker(fw)
        assert sorted(e["extra"]["sync_id"] for e in standin.posts) == ["new", "old"]
        d = next(iter(fw.store.for_syncs(CID, ["old"])["old"]))
        assert d.state is DeliveryState.DELIVERED

        forget_forwarding(client, p, "old")
        again = deliver(http, body)
        run_worker(fw)
        assert sorted(e["extra"]["sync_id"] for e in standin.posts) == ["new", "old"]
        assert again["status"] == "duplicate"
