"""The Forwarder a worker (or a CLI command) composes from the settings."""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis

from fivetran_events import ConfigurationError, Settings, __version__
from fivetran_events.destinations import DestinationTable, current
from fivetran_events.exceptions import FivetranApiError
from fivetran_events.fivetran_api import FivetranClient

from ..airflow_client import AirflowClient
from ..forwarding.enqueue import build_enqueuer
from ..forwarding.forwarder import Forwarder, Sender
from ..forwarding.recorder import Recorder
from .queue import forward_queue

log = logging.getLogger(__name__)


def build_forwarder(settings: Settings, with_airflow: bool = True) -> Forwarder:
    """Build a Forwarder (without Airflow: replay and listings, or lineage alone)."""
    client = settings.redis_client()
    enqueuer = build_enqueuer(settings, client)
    fivetran = (
        FivetranClient.from_settings(settings)
        if settings.fivetran_api_key and settings.fivetran_api_secret
        else None
    )
    sender = None
    if with_airflow and enqueuer.lineage:
        sender = lineage_sender(settings, client, fivetran)
    airflow = None
    if with_airflow and (settings.airflow_url or not enqueuer.lineage):
        airflow = AirflowClient.from_settings(settings)
    return Forwarder(
        settings,
        enqueuer.store,
        enqueuer,
        forward_queue(settings, client),
        airflow,
        lineage=sender,
        fivetran=fivetran,
    )


def lineage_sender(
    settings: Settings, client: redis.Redis, fivetran: FivetranClient | None
) -> Callable[[Recorder], Sender]:
    """Return what builds the OpenLineage sender, or say its extra is missing."""
    try:
        from ..forwarding.lineage import LineageSender, table_outputs
    except ImportError as exc:
        raise ConfigurationError(
            f"OpenLineage is on but its client is not installed ({exc}): "
            "install our wheel with its [lineage] extra, e.g. pip install "
            f"'dist/fivetran_events-{__version__}-py3-none-any.whl[lineage]' "
            "(docs/install.md), or set FIVETRAN_EVENTS_LINEAGE=off"
        ) from None

    def tables(connector_id: str) -> list[DestinationTable] | None:
        try:
            return current(client, settings, fivetran, connector_id)
        except FivetranApiError as exc:
            log.warning(
                "connector %s: its run has no outputs, Fivetran failed: %s", connector_id, exc
            )
            return None

    def sender(recorder: Recorder) -> Sender:
        return LineageSender.from_settings(recorder, settings, outputs=table_outputs(tables))

    return sender
