"""sensors.renders_to_itself: only strings Jinja gives back unchanged skip the compile."""

from __future__ import annotations

import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2.nativetypes import NativeEnvironment
from jinja2.sandbox import SandboxedEnvironment

from airflow_plugin.sensors import renders_to_itself

ENVS = {
    # Airflow renders in a sandboxed environment with Jinja's default delimiters.
    "default": SandboxedEnvironment(undefined=jinja2.StrictUndefined),
    # A DAG's jinja_environment_kwargs can change every delimiter and add line prefixes.
    "custom": SandboxedEnvironment(
        variable_start_string="[[",
        variable_end_string="]]",
        block_start_string="<%",
        block_end_string="%>",
        comment_start_string="<#",
        comment_end_string="#>",
        line_statement_prefix="%%",
        line_comment_prefix="##",
    ),
}
# Text near every marker and line break, and ordinary connector ids.
TEXT = st.text(alphabet="ab_09 {}%#[]<>\n\r.-é", max_size=24)


@pytest.mark.parametrize("name", sorted(ENVS))
@settings(max_examples=600, deadline=None)
@given(text=TEXT)
def test_what_it_lets_through_renders_unchanged(name: str, text: str) -> None:
    env = ENVS[name]
    if renders_to_itself(text, env):
        assert env.from_string(text).render() == text


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("default", "bf_conn", True),
        ("default", "connector.with-dots é", True),
        ("default", "[[ x ]] <% if %>", True),
        ("default", "c_{{ ds_nodash }}", False),
        ("default", "{% raw %}x{% endraw %}", False),
        ("default", "a{#note#}", False),
        ("default", "trailing\n", False),
        ("default", "a\r\nb", False),
        ("custom", "c_{{ x }}", True),
        ("custom", "c_[[ x ]]", False),
        ("custom", "x <% if y %>", False),
        ("custom", "x ## note", False),
        ("custom", "%% set a = 1", False),
    ],
)
def test_markers_of_the_environment_in_use(name: str, text: str, expected: bool) -> None:
    assert renders_to_itself(text, ENVS[name]) is expected
    if expected:
        assert ENVS[name].from_string(text).render() == text
    elif "\n" not in text and "\r" not in text:
        # The refused ones are templates indeed (or would be): Jinja reads them.
        assert list(ENVS[name].lex(text)) != [(0, "data", text)]


def test_a_native_environment_is_never_plain() -> None:
    """render_template_as_native_obj turns "123" into 123: no shortcut there."""
    env = NativeEnvironment()
    rendered: object = env.from_string("123").render()
    assert rendered == 123
    assert not renders_to_itself("123", env)
    assert not renders_to_itself("bf_conn", env)
