"""Settings from the environment and from a folder of secret files."""

from __future__ import annotations

from pathlib import Path

import pytest

from fivetran_events import ConfigurationError, load_settings


class TestSecretsDir:
    def test_files_fill_settings_and_the_environment_wins(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Compose secrets mounted as files become settings; a variable overrides a file."""
        (tmp_path / "fivetran_events_webhook_secrets").write_text("s1,s2\n")
        (tmp_path / "fivetran_events_api_tokens").write_text("t1\n")
        (tmp_path / "fivetran_events_airflow_password").write_text("pw\n")
        monkeypatch.setenv("FIVETRAN_EVENTS_SECRETS_DIR", str(tmp_path))
        monkeypatch.setenv("FIVETRAN_EVENTS_API_TOKENS", "from-env")
        s = load_settings()
        assert s.webhook_secrets == ["s1", "s2"]
        assert s.api_tokens == ["from-env"]
        assert s.airflow_password is not None
        assert s.airflow_password.get_secret_value() == "pw"

    def test_missing_folder_is_a_clear_error(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("FIVETRAN_EVENTS_SECRETS_DIR", str(tmp_path / "nope"))
        with pytest.raises(ConfigurationError, match="FIVETRAN_EVENTS_SECRETS_DIR"):
            load_settings()

    def test_bad_value_names_the_variable(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("FIVETRAN_EVENTS_MAX_BODY_BYTES", "12")
        with pytest.raises(ConfigurationError, match="FIVETRAN_EVENTS_MAX_BODY_BYTES"):
            load_settings()


class TestDocumented:
    def test_every_setting_is_in_the_manual(self) -> None:
        """The manual's configuration reference (docs/configuration.md) names every
        FIVETRAN_EVENTS_ variable."""
        from fivetran_events.settings import SECRETS_DIR_VARIABLE, Settings

        page = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
        names = [f"FIVETRAN_EVENTS_{f.upper()}" for f in Settings.model_fields]
        missing = [n for n in [*names, SECRETS_DIR_VARIABLE] if f"`{n}`" not in page]
        assert missing == []
