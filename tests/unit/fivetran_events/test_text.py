"""fivetran_events/text.py: Redis replies decoded, and yes/no words read one way."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fivetran_events.text import FLAG_WORDS, as_text, parse_flag

YES = ["1", "true", "yes", "on"]
NO = ["0", "false", "no", "off"]


class TestAsText:
    @given(st.text())
    def test_bytes_and_str_read_alike(self, text: str) -> None:
        """A decoding client and a raw one give the same text."""
        assert as_text(text.encode()) == as_text(text) == text

    def test_a_number_reply_is_its_digits(self) -> None:
        assert as_text(42) == "42"

    def test_undecodable_bytes_are_an_error_not_garbage(self) -> None:
        with pytest.raises(UnicodeDecodeError):
            as_text(b"\xff\xfe")


class TestParseFlag:
    def test_the_words_are_exactly_these(self) -> None:
        assert {w for w, v in FLAG_WORDS.items() if v} == set(YES)
        assert {w for w, v in FLAG_WORDS.items() if not v} == set(NO)

    @given(st.sampled_from(YES + NO), st.data())
    def test_either_case_reads_the_same(self, word: str, data: st.DataObject) -> None:
        spelt = "".join(
            c.upper() if data.draw(st.booleans(), label=f"upper {c}") else c for c in word
        )
        assert parse_flag(spelt, "opt") is (word in YES)

    @given(st.text(max_size=12).filter(lambda t: t.lower() not in FLAG_WORDS))
    def test_any_other_word_is_refused_naming_the_option_and_the_word(self, text: str) -> None:
        with pytest.raises(ValueError) as refused:
            parse_flag(text, "ssl_verify")
        assert str(refused.value) == f"ssl_verify must be true or false, not {text!r}"

    @pytest.mark.parametrize("text", [" yes", "yes ", "y", "n", "2", "True!", ""])
    def test_near_words_are_refused(self, text: str) -> None:
        with pytest.raises(ValueError, match="must be true or false"):
            parse_flag(text, "opt")
