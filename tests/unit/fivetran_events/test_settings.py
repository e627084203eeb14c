"""Settings from the environment and from a folder of secret files."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fivetran_events import ConfigurationError, load_settings
from fivetran_events.settings import check_secret_length

S1, S2, T1, FROM_ENV = (f"{name}-{'x' * 24}" for name in ("s1", "s2", "t1", "from-env"))


class TestSecretsDir:
    def test_files_fill_settings_and_the_environment_wins(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Compose secrets mounted as files become settings; a variable overrides a file."""
        (tmp_path / "fivetran_events_webhook_secrets").write_text(f"{S1},{S2}\n")
        (tmp_path / "fivetran_events_api_tokens").write_text(f"{T1}\n")
        (tmp_path / "fivetran_events_airflow_password").write_text("pw\n")
        monkeypatch.setenv("FIVETRAN_EVENTS_SECRETS_DIR", str(tmp_path))
        monkeypatch.setenv("FIVETRAN_EVENTS_API_TOKENS", FROM_ENV)
        s = load_settings()
        assert s.webhook_secrets == [S1, S2]
        assert s.api_tokens == [FROM_ENV]
        assert s.airflow_password is not None
        assert s.airflow_password.get_secret_value() == "pw"

    def test_systemd_credentials_fill_settings(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """systemd's LoadCredential= folder ($CREDENTIALS_DIRECTORY) is read like the
        secrets folder when FIVETRAN_EVENTS_SECRETS_DIR is unset; that variable wins."""
        (tmp_path / "fivetran_events_webhook_secrets").write_text(f"{S1}\n")
        monkeypatch.delenv("FIVETRAN_EVENTS_SECRETS_DIR", raising=False)
        monkeypatch.delenv("FIVETRAN_EVENTS_WEBHOOK_SECRETS", raising=False)
        monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
        assert load_settings().webhook_secrets == [S1]
        other = tmp_path / "other"
        other.mkdir()
        monkeypatch.setenv("FIVETRAN_EVENTS_SECRETS_DIR", str(other))
        assert load_settings().webhook_secrets == []

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


class TestSecretLength:
    @pytest.mark.parametrize(
        ("variable", "value"),
        [
            ("FIVETRAN_EVENTS_WEBHOOK_SECRETS", "short-secret"),
            ("FIVETRAN_EVENTS_WEBHOOK_SECRETS", f"{S1},{'y' * 23}"),
            ("FIVETRAN_EVENTS_API_TOKENS", "t" * 23),
        ],
        ids=["secret", "second-secret", "token"],
    )
    def test_under_24_bytes_is_refused_without_echoing_it(
        self, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
    ) -> None:
        """A secret or token under 24 bytes stops the start, naming the variable and the
        rule, never the value."""
        monkeypatch.setenv(variable, value)
        with pytest.raises(ConfigurationError) as caught:
            load_settings()
        message = str(caught.value)
        assert message.startswith(variable) and "at least 24" in message, message
        assert value.split(",")[-1] not in message

    def test_24_bytes_are_enough(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("FIVETRAN_EVENTS_WEBHOOK_SECRETS", "é" * 12)  # 24 bytes
        monkeypatch.setenv("FIVETRAN_EVENTS_API_TOKENS", "t" * 24)
        s = load_settings()
        assert s.webhook_secrets == ["é" * 12] and s.api_tokens == ["t" * 24]


#: Characters the refusal's own words never hold, so a value found in it was echoed.
UNSAID = st.characters(blacklist_characters="0123456789").filter(
    lambda c: not c.isascii()
) | st.sampled_from("QZ#%!^~")


class TestSecretLengthCheck:
    @given(
        st.lists(st.text("s", min_size=24, max_size=40), max_size=3),
        st.text(UNSAID, min_size=1, max_size=23).filter(lambda v: len(v.encode()) < 24),
    )
    def test_the_first_short_value_is_counted_and_never_shown(
        self, good: list[str], short: str
    ) -> None:
        with pytest.raises(ValueError) as refused:
            check_secret_length([*good, short, "x"], "FIVETRAN_EVENTS_API_TOKENS")
        said = str(refused.value)
        size = len(short.encode())
        assert said.startswith(
            f"FIVETRAN_EVENTS_API_TOKENS number {len(good) + 1} is {size} bytes;"
        )
        assert short not in said

    @given(st.lists(st.text(min_size=24), max_size=4))
    def test_long_enough_values_pass_unchanged(self, values: list[str]) -> None:
        assert check_secret_length(values, "x") == values


class TestDocumented:
    def test_every_setting_is_in_the_manual(self) -> None:
        """The manual's configuration reference (docs/configuration.md) names every
        FIVETRAN_EVENTS_ variable."""
        from fivetran_events.settings import SECRETS_DIR_VARIABLE, Settings

        page = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
        names = [f"FIVETRAN_EVENTS_{f.upper()}" for f in Settings.model_fields]
        missing = [n for n in [*names, SECRETS_DIR_VARIABLE] if f"`{n}`" not in page]
        assert missing == []


class TestFivetranApi:
    def test_from_the_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Key, secret and URL (its trailing slash dropped); the secret in no repr."""
        monkeypatch.setenv("FIVETRAN_EVENTS_FIVETRAN_API_KEY", "the-key")
        monkeypatch.setenv("FIVETRAN_EVENTS_FIVETRAN_API_SECRET", "the-api-secret")
        monkeypatch.setenv("FIVETRAN_EVENTS_FIVETRAN_API_URL", "http://127.0.0.1:8080/")
        s = load_settings()
        assert s.fivetran_api_key is not None and s.fivetran_api_secret is not None
        assert s.fivetran_api_key.get_secret_value() == "the-key"
        assert s.fivetran_api_secret.get_secret_value() == "the-api-secret"
        assert s.fivetran_api_url == "http://127.0.0.1:8080"
        assert "the-api-secret" not in repr(s) and "the-key" not in repr(s)

    def test_defaults(self) -> None:
        s = load_settings()
        assert (s.fivetran_api_key, s.fivetran_api_secret) == (None, None)
        assert s.fivetran_api_url == "https://api.fivetran.com"

    def test_from_the_secrets_folder(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Files named like the variables; a file's trailing newline is not part of it."""
        (tmp_path / "fivetran_events_fivetran_api_key").write_text("file-key\n")
        (tmp_path / "fivetran_events_fivetran_api_secret").write_text("file-secret\n")
        monkeypatch.setenv("FIVETRAN_EVENTS_SECRETS_DIR", str(tmp_path))
        s = load_settings()
        assert s.fivetran_api_key is not None and s.fivetran_api_secret is not None
        assert s.fivetran_api_key.get_secret_value() == "file-key"
        assert s.fivetran_api_secret.get_secret_value() == "file-secret"

    @pytest.mark.parametrize(
        ("url", "says"),
        [
            ("ftp://api.fivetran.com", "http:// or https://"),
            ("api.fivetran.com", "http:// or https://"),
            ("https://me:pa55word@api.fivetran.com", "must not carry a user or password"),
            ("https://api.fivetran.com/?x=1", "without ?query"),
        ],
    )
    @pytest.mark.parametrize("variable", ["FIVETRAN_API_URL", "PUBLIC_URL"])
    def test_a_bad_url_names_the_variable(
        self, monkeypatch: pytest.MonkeyPatch, url: str, says: str, variable: str
    ) -> None:
        monkeypatch.setenv(f"FIVETRAN_EVENTS_{variable}", url)
        with pytest.raises(ConfigurationError) as caught:
            load_settings()
        assert str(caught.value).startswith(f"FIVETRAN_EVENTS_{variable}: ")
        assert says in str(caught.value) and "pa55word" not in str(caught.value)

    def test_the_public_url_is_a_base_url(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Optional; the facet's schema URL is built under it, so no trailing ``/``."""
        assert load_settings().public_url is None
        monkeypatch.setenv("FIVETRAN_EVENTS_PUBLIC_URL", "https://events.example.com/fte/ ")
        assert load_settings().public_url == "https://events.example.com/fte"

    def test_the_client_names_what_is_missing(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from fivetran_events.fivetran_api import FivetranClient

        monkeypatch.setenv("FIVETRAN_EVENTS_FIVETRAN_API_KEY", "the-key")
        with pytest.raises(ConfigurationError) as caught:
            FivetranClient.from_settings(load_settings())
        assert str(caught.value).startswith("FIVETRAN_EVENTS_FIVETRAN_API_SECRET must be set")
        monkeypatch.setenv("FIVETRAN_EVENTS_FIVETRAN_API_SECRET", "s")
        assert repr(FivetranClient.from_settings(load_settings())) == (
            "FivetranClient(base_url='https://api.fivetran.com')"
        )


class TestPartitions:
    def test_off_unless_a_grain_is_set(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Unset or empty: no partitioned events; the sensor's default criterion."""
        s = load_settings()
        assert (s.partition_grain, s.partition_criterion, s.partition_max_keys) == (
            None,
            "ended_after",
            None,
        )
        monkeypatch.setenv("FIVETRAN_EVENTS_PARTITION_GRAIN", " ")
        assert load_settings().partition_grain is None

    def test_hour_day_and_the_criterion(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("FIVETRAN_EVENTS_PARTITION_GRAIN", "hour")
        monkeypatch.setenv("FIVETRAN_EVENTS_PARTITION_CRITERION", "started_after")
        monkeypatch.setenv("FIVETRAN_EVENTS_PARTITION_MAX_KEYS", "48")
        s = load_settings()
        assert (s.partition_grain, s.partition_criterion, s.partition_max_keys) == (
            "hour",
            "started_after",
            48,
        )

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("PARTITION_GRAIN", "week"),
            ("PARTITION_CRITERION", "sometime"),
            ("PARTITION_MAX_KEYS", "0"),
        ],
    )
    def test_a_bad_value_names_its_variable(
        self, monkeypatch: pytest.MonkeyPatch, name: str, value: str
    ) -> None:
        monkeypatch.setenv(f"FIVETRAN_EVENTS_{name}", value)
        with pytest.raises(ConfigurationError, match=f"FIVETRAN_EVENTS_{name}"):
            load_settings()
