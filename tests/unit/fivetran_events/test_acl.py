"""fivetran_events/acl.py's rules, read as text: escaped prefixes, the two users' reach,
usable user names, and passwords given only as their SHA-256 (a real redis-server
applying them: tests/integration/webhook_app/test_redis_acl.py)."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fivetran_events.acl import (
    AIRFLOW_PASSWORD_VARIABLE,
    AIRFLOW_USER,
    APP_PASSWORD_VARIABLE,
    APP_USER,
    MIN_PASSWORD_BYTES,
    RQ_PATTERN,
    airflow_read_patterns,
    airflow_rules,
    airflow_write_patterns,
    app_rules,
    check_user_name,
    glob_escape,
    password_sha256,
    users,
)

APP_PASSWORD = "a" * MIN_PASSWORD_BYTES
AIRFLOW_PASSWORD = "b" * MIN_PASSWORD_BYTES
NAMES = (APP_USER, AIRFLOW_USER)
GLOB = "*?[]\\"


def unescape(pattern: str) -> str:
    return re.sub(r"\\(.)", r"\1", pattern)


def unescaped_globs(pattern: str) -> list[str]:
    """The glob characters of ``pattern`` that are not escaped (that Redis expands)."""
    return [c for c in re.sub(r"\\.", "", pattern) if c in GLOB]


class TestGlobEscape:
    @given(st.text(alphabet=st.sampled_from("ab:*?[]\\-_") | st.characters(), max_size=30))
    def test_escapes_every_glob_character_and_nothing_else(self, text: str) -> None:
        escaped = glob_escape(text)
        assert unescape(escaped) == text
        assert unescaped_globs(escaped) == []

    def test_a_plain_prefix_is_unchanged(self) -> None:
        assert glob_escape("fivetran-events:") == "fivetran-events:"


class TestPrefixes:
    @pytest.mark.parametrize("prefix", ["test:", "a*:", "x?[y]:", "back\\slash:"])
    def test_every_key_pattern_starts_with_the_escaped_prefix(self, prefix: str) -> None:
        """A prefix holding glob characters reaches only its own keys, never another's."""
        patterns = [*airflow_read_patterns(prefix), *airflow_write_patterns(prefix)]
        assert patterns
        for pattern in patterns:
            assert pattern.startswith(glob_escape(prefix)), pattern
        keys = [r for r in app_rules(prefix) if r.startswith("~") and r != f"~{RQ_PATTERN}"]
        assert keys == [f"~{glob_escape(prefix)}*"]

    def test_the_variable_parts_become_stars(self) -> None:
        patterns = airflow_read_patterns("p:")
        assert all("\x00" not in p for p in patterns)
        assert {"p:h:*:ok", "p:connectors", "p:fwd:s:*:*", "p:fwd:d:*", "p:tables:*"} <= set(
            patterns
        )
        # Only the connectors' set is one key; every other names an id (a star).
        assert [p for p in patterns if "*" not in p] == ["p:connectors"]
        assert airflow_write_patterns("p:") == ["p:waitfrom:*"]


class TestReach:
    def test_the_app_owns_its_prefix_and_rq_but_no_dangerous_command(self) -> None:
        rules = app_rules("test:")
        assert {"~test:*", f"~{RQ_PATTERN}", "&test:changes:*", "+@all", "-@dangerous"} <= set(
            rules
        )
        # INFO is given back after -@dangerous: /readyz reads maxmemory-policy from it.
        assert rules.index("+info") > rules.index("-@dangerous")

    def test_airflow_reads_the_history_and_writes_only_its_waitfrom_keys(self) -> None:
        rules = airflow_rules("test:")
        reads = [r for r in rules if r.startswith("%R~")]
        writes = [r for r in rules if r.startswith("~")]
        assert len(reads) == len(airflow_read_patterns("test:")) > 0
        assert writes == ["~test:waitfrom:*"]
        assert not [r for r in rules if RQ_PATTERN in r]
        assert {"+@read", "-@keyspace", "-@dangerous"} <= set(rules)
        assert "+@write" not in rules and "+@all" not in rules
        assert [r for r in rules if r.startswith("+") and not r.startswith("+@")] == [
            "+multi",
            "+exec",
            "+discard",
            "+set",
            "+subscribe",
            "+psubscribe",
            "+unsubscribe",
            "+punsubscribe",
        ]
        # The read categories come before the commands they would otherwise take away.
        assert rules.index("-@keyspace") < rules.index("+set")


class TestUserNames:
    @settings(max_examples=40)
    @given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}", fullmatch=True))
    def test_a_usable_name_is_kept(self, name: str) -> None:
        assert check_user_name(name) == name

    @pytest.mark.parametrize(
        "name", ["", "two words", 'quo"te', "on>rule", "-starts", "#hash", "a" * 65, "tab\t"]
    )
    def test_a_name_redis_would_read_as_rules_is_refused(self, name: str) -> None:
        with pytest.raises(ValueError, match="not a usable Redis user name"):
            check_user_name(name)

    def test_the_two_users_need_two_names(self) -> None:
        with pytest.raises(ValueError, match="different names"):
            users("test:", (APP_PASSWORD, AIRFLOW_PASSWORD), ("same", "same"))


class TestPasswords:
    def test_a_short_password_is_refused_naming_its_variable_not_its_value(self) -> None:
        secret = "s3cret-but-short"
        with pytest.raises(ValueError) as refused:
            password_sha256(secret, APP_PASSWORD_VARIABLE)
        said = str(refused.value)
        assert APP_PASSWORD_VARIABLE in said and f"{len(secret)} bytes" in said
        assert secret not in said

    def test_bytes_are_counted_not_characters(self) -> None:
        eight = "\u00e9\u20ac\u00e9\u20ac\u00e9\u20ac\u00e9\u20ac"  # 20 bytes in 8 characters
        with pytest.raises(ValueError, match="20 bytes"):
            password_sha256(eight, APP_PASSWORD_VARIABLE)
        assert password_sha256("\u20ac" * 8, APP_PASSWORD_VARIABLE)  # 24 bytes

    def test_each_user_names_its_own_variable(self) -> None:
        with pytest.raises(ValueError, match=AIRFLOW_PASSWORD_VARIABLE):
            users("test:", (APP_PASSWORD, "short"), NAMES)
        with pytest.raises(ValueError, match=APP_PASSWORD_VARIABLE):
            users("test:", ("short", AIRFLOW_PASSWORD), NAMES)

    @given(
        st.text(min_size=MIN_PASSWORD_BYTES, max_size=60).filter(
            lambda p: len(p.encode()) >= MIN_PASSWORD_BYTES and p.strip()
        )
    )
    def test_the_lines_hold_the_hash_never_the_password(self, password: str) -> None:
        app, airflow = users("test:", (password, AIRFLOW_PASSWORD), NAMES)
        digest = hashlib.sha256(password.encode()).hexdigest()
        assert app.password_sha256 == digest
        for line in (app.command(), app.acl_file_line()):
            assert f"#{digest}" in line.split()
            assert password not in line
        assert password not in airflow.command()


class TestLines:
    def test_the_app_comes_first_and_each_line_resets_its_user(self) -> None:
        app, airflow = users("test:", (APP_PASSWORD, AIRFLOW_PASSWORD), NAMES)
        assert (app.name, airflow.name) == NAMES
        digest = hashlib.sha256(APP_PASSWORD.encode()).hexdigest()
        start = ["ACL", "SETUSER", APP_USER, "reset", "on", f"#{digest}"]
        assert app.command().split()[:6] == start
        assert app.acl_file_line() == "user " + " ".join(app.words())
        assert app.rules == tuple(app_rules("test:"))
        assert airflow.rules == tuple(airflow_rules("test:"))
