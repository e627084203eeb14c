"""Redis hashes have two writers in production code: the history's owner and the
delivery's owner, with their scripts.

The connectors hash is the history writer's (``fivetran_events/history/``), a delivery
record is ``webhook_app/forwarding/store.py``'s (its Lua in ``_lua.py``). Anyone else
who needs a hash changed asks one of them through a named transition, so a new kind of
delivery or a new history field cannot grow a third writer unseen.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The production packages.
PACKAGES = ("fivetran_events", "webhook_app", "airflow_plugin")
#: The modules that may write hashes or send scripts (relative to the repository).
OWNERS = frozenset(
    {
        "fivetran_events/history/writer.py",
        "fivetran_events/history/_lua.py",
        "webhook_app/forwarding/store.py",
        "webhook_app/forwarding/_lua.py",
    }
)
#: redis-py's methods (and Redis's commands) that change a hash.
HASH_WRITES = frozenset(
    {
        "hset",
        "hsetnx",
        "hmset",
        "hincrby",
        "hincrbyfloat",
        "hdel",
        "hsetex",
        "hgetdel",
        "hgetex",
        "hexpire",
        "hpexpire",
        "hexpireat",
        "hpexpireat",
        "hpersist",
    }
)
#: What runs a script (a script may write anything): only the owners send scripts.
SCRIPT_CALLS = frozenset(
    {"register_script", "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}
)
#: A hash command named in a string: Lua's redis.call('HSET', ...), execute_command("HDEL").
QUOTED = re.compile("['\"](" + "|".join(sorted(HASH_WRITES)) + ")['\"]", re.IGNORECASE)


def hash_writes(source: str) -> list[str]:
    """Where ``source`` writes a hash or runs a script: calls of such a method, a string
    that is such a method's name, or a command quoted in a string (Lua, raw commands)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name.lower() in HASH_WRITES | SCRIPT_CALLS:
                found.append(f"line {node.lineno}: {name}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text.lower() in HASH_WRITES | SCRIPT_CALLS or QUOTED.search(text):
                found.append(f"line {node.lineno}: {text[:60]!r}")
    return found


def writers() -> dict[str, list[str]]:
    """Every production module that writes a hash or runs a script, with where."""
    out: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found = hash_writes(path.read_text())
            if found:
                out[path.relative_to(ROOT).as_posix()] = found
    return out


class TestHashOwners:
    def test_only_the_history_and_the_delivery_store_write_hashes(self) -> None:
        """No production module but the two owners writes a hash or sends a script."""
        strangers = {m: w for m, w in writers().items() if m not in OWNERS}
        assert strangers == {}, (
            "these modules write Redis hashes or run scripts; ask the delivery store "
            "(webhook_app/forwarding/store.py) or the history writer for a transition instead"
        )

    def test_the_owners_are_the_writers(self) -> None:
        """Each owner does write (a renamed owner must be renamed here too)."""
        assert set(writers()) == OWNERS

    def test_a_planted_write_is_found(self) -> None:
        """The scan sees each way of writing: a method, a pipeline, Lua, a raw command,
        a script."""
        planted = {
            "client.hset(key, 'state', 'delivered')": "hset()",
            "with c.pipeline() as p:\n    p.hincrby(key, 'attempts', 1)": "hincrby()",
            "LUA = \"redis.call('HDEL', KEYS[1], 'x')\"": "'HDEL'",
            "client.execute_command('hsetnx', key, 'f', 'v')": "'hsetnx'",
            "run = client.register_script(LUA)": "register_script()",
            "getattr(client, 'hmset')(key, {})": "'hmset'",
        }
        for source, expected in planted.items():
            assert any(expected in w for w in hash_writes(source)), source
        assert hash_writes("client.hget(key, 'state')\nclient.hgetall(key)") == []
