"""Which webhook URLs ``fivetran webhooks create`` refuses without --allow-insecure (pure)."""

from __future__ import annotations

import pytest

from webhook_app.cli.fivetran import unreachable_reason


@pytest.mark.parametrize(
    "url",
    [
        "https://fivetran-events.example.com/webhooks/fivetran",
        "https://fivetran-events.example.com:8443/webhooks/fivetran",
        "https://8.8.8.8/webhooks/fivetran",
        "https://[2001:4860:4860::8888]/webhooks/fivetran",
        # A name is not resolved here: what it resolves to for Fivetran settles it.
        "https://internal.corp/webhooks/fivetran",
    ],
)
def test_public_https_urls_pass(url: str) -> None:
    assert unreachable_reason(url) is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://fivetran-events.example.com/w", "is not https://"),
        ("ftp://fivetran-events.example.com/w", "is not https://"),
        ("https:///w", "has no host"),
        ("https://LOCALHOST/w", "names localhost"),
        ("https://api.localhost/w", "names api.localhost"),
        ("https://127.0.0.2/w", "loopback"),
        ("https://[::1]:8443/w", "loopback"),
        ("https://0.0.0.0/w", "non-public"),
        ("https://192.168.1.10/w", "private"),
        ("https://172.16.0.1/w", "private"),
        ("https://[fd00::1]/w", "private"),
        ("https://169.254.169.254/w", "link-local"),
        ("https://[fe80::1]/w", "link-local"),
        ("https://100.64.0.1/w", "non-public"),  # carrier-grade NAT
        ("https://example.com:notaport/w", "is not a valid URL"),
    ],
)
def test_urls_fivetran_cannot_reach(url: str, says: str) -> None:
    reason = unreachable_reason(url)
    assert reason is not None and says in reason, reason
