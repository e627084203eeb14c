"""Sentinel with passwords and TLS everywhere: the same URL carries both, end to end.

A primary, a replica and three sentinels that require passwords (the sentinels one of
their own) and speak only TLS, with a private CA (``testkit/sentinel.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from fivetran_events import Settings, parse_event
from fivetran_events.keys import ConnectorKeys
from testkit.sentinel import sentinel_setup
from testkit.support import payload, post_signed, signed
from webhook_app import create_app

pytestmark = pytest.mark.slow


def test_webhook_records_through_sentinels_with_passwords_and_tls(
    settings: Settings, tmp_path: Path
) -> None:
    with sentinel_setup(
        tmp_path / "redis", password="p@ss word", sentinel_password="s:pw", tls=True
    ) as nodes:
        url = nodes.url()
        assert url.startswith("rediss+sentinel://:p%40ss%20word@") and "sentinel_ssl=true" in url
        http = create_app(
            settings.model_copy(update={"redis_url": url, "redis_wait_replicas": 1})
        ).test_client()
        body = payload(sync_id="s-tls")
        resp = post_signed(http, body)
        assert resp.status_code == 200 and resp.get_json()["status"] == "recorded"
        event = parse_event(signed(body)[0])
        seen = ConnectorKeys("test:", event.connector_id).seen
        for server in (nodes.primary, nodes.replica):  # WAIT 1: on both when acknowledged
            assert nodes.node(server).zscore(seen, event.dedup_id) is not None

        # The TLS is real: without the private CA the certificate is refused.
        no_ca = url.split("&ssl_ca_certs=")[0]
        refused = create_app(settings.model_copy(update={"redis_url": no_ca})).test_client()
        resp = post_signed(refused, payload(sync_id="s-no-ca"))
        assert resp.status_code == 503 and resp.headers.get("Retry-After"), resp.get_json()
        # And so is the primary's password.
        wrong = url.replace("p%40ss%20word", "wrong")
        with pytest.raises(redis.AuthenticationError):
            settings.model_copy(update={"redis_url": wrong}).redis_client().ping()
