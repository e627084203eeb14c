"""Template fields that hold no template: returned as they are, not compiled by Jinja.

A sensor's ``connector_id`` is a template field and nearly always plain text
(``"bf_conn"``). Airflow hands every string field to Jinja, which renders such a string
to itself; in a task's process that first compile also builds Jinja's lexer, a cost
every sensor task of a backfill pays and a no-op does not. ``renders_to_itself`` says
when Jinja could not change a string, from the environment Airflow renders with (its
delimiters and prefixes, however a DAG set them), so skipping the compile changes no
result.
"""

from __future__ import annotations

from typing import Any


def renders_to_itself(text: str, env: Any) -> bool:
    """True when rendering ``text`` in ``env`` can only give ``text`` back.

    No delimiter or line prefix of ``env`` occurs in it, and no line break (Jinja rewrites
    line endings and drops a final newline). A native environment (a DAG's
    ``render_template_as_native_obj``) turns ``"123"`` into ``123``, so nothing is
    plain text there.
    """
    from jinja2.nativetypes import NativeEnvironment

    if isinstance(env, NativeEnvironment) or "\n" in text or "\r" in text:
        return False
    markers = (
        env.variable_start_string,
        env.block_start_string,
        env.comment_start_string,
        env.line_statement_prefix,
        env.line_comment_prefix,
    )
    return not any(marker and marker in text for marker in markers)
