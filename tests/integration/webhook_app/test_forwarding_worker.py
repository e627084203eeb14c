"""The worker hands its own Forwarder to the jobs it runs; nothing module-wide decides.

Real redis-server, the real Flask app and RQ; Airflow 2 is the stand-in
(testkit/airflow2_standin.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryState
from fivetran_events.keys import delivery_id
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import (
    CID,
    URI,
    forwarder,
    post_event,
)
from testkit.worker_process import worker_env
from webhook_app.forwarding.forwarder import Forwarder
from webhook_app.worker.rq_worker import ForwardingWorker

pytestmark = pytest.mark.timeout(60)

#: Nothing listens on the discard port of loopback: an Airflow there is unreachable.
UNREACHABLE = "http://127.0.0.1:9"


def delivery_state(fw: Forwarder, sync_id: str) -> DeliveryState:
    d = fw.store.get(delivery_id(CID, sync_id, URI))
    assert d is not None
    return d.state


class TestForwardingWorker:
    def test_jobs_use_the_workers_forwarder_not_the_environment(
        self,
        http: Any,
        fw: Forwarder,
        settings: Settings,
        standin: Airflow2StandIn,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """With the environment naming an unreachable Airflow, the worker's own one is used."""
        for k, v in worker_env(settings, airflow_url=UNREACHABLE).items():
            monkeypatch.setenv(k, v)
        post_event(http, sync_id="s1")
        fw.sweep()  # as the worker does when it starts
        ForwardingWorker(fw).work(burst=True, with_scheduler=False)
        assert len(standin.posts) == 1
        assert delivery_state(fw, "s1") is DeliveryState.DELIVERED

    def test_two_workers_in_one_process_each_use_their_own(
        self,
        http: Any,
        fw: Forwarder,
        settings: Settings,
        standin: Airflow2StandIn,
    ) -> None:
        """A worker whose Airflow is unreachable does not lend it to another's jobs."""
        # Its retry of s1 at least five minutes away: the sweep before s2's takes s2 only.
        cut_off = forwarder(
            settings, UNREACHABLE, "nobody", "nothing", forward_backoff_seconds=600.0
        )
        post_event(http, sync_id="s1")
        cut_off.sweep()
        ForwardingWorker(cut_off).work(burst=True, with_scheduler=False)
        assert standin.posts == []
        assert delivery_state(fw, "s1") is not DeliveryState.DELIVERED
        post_event(http, sync_id="s2")
        assert fw.sweep() == 1
        ForwardingWorker(fw).work(burst=True, with_scheduler=False)
        assert len(standin.posts) == 1
        assert delivery_state(fw, "s2") is DeliveryState.DELIVERED
