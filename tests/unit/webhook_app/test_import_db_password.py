"""``import --from-db``: the password joins the URL from the environment or a file."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from webhook_app.cli.importing import DB_PASSWORD_VARIABLE, database_url

URL = "postgresql+psycopg://reader@warehouse:5432/analytics"


def test_the_file_wins_and_its_first_line_is_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DB_PASSWORD_VARIABLE, "from-env")
    secret = tmp_path / "pw"
    secret.write_text("p@ss:word/1\nignored\n")
    assert database_url(URL, secret) == (
        "postgresql+psycopg://reader:p%40ss%3Aword%2F1@warehouse:5432/analytics"
    )


def test_the_environment_and_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DB_PASSWORD_VARIABLE, "from-env")
    assert (
        database_url(URL, None) == "postgresql+psycopg://reader:from-env@warehouse:5432/analytics"
    )
    monkeypatch.delenv(DB_PASSWORD_VARIABLE)
    assert database_url(URL, None) == URL


def test_a_password_in_the_url_is_refused() -> None:
    with pytest.raises(click.BadParameter, match=DB_PASSWORD_VARIABLE):
        database_url("postgresql+psycopg://reader:secret@warehouse/analytics", None)
