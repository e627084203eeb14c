"""Text as it reaches us from outside: Redis replies decoded, yes/no words read.

Redis hands back ``bytes`` (or ``str`` from a decoding client), and URLs, query strings and
the API spell a yes/no option in words: one reading of each, shared by both sides.
"""

from __future__ import annotations

#: The words a yes/no option may be spelt in (URL options, query parameters), either case.
FLAG_WORDS = {"1": True, "true": True, "yes": True, "on": True}
FLAG_WORDS |= {"0": False, "false": False, "no": False, "off": False}


def as_text(value: object) -> str:
    """Decode a Redis reply (bytes, or str from a decoding client) to ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_flag(text: str, name: str) -> bool:
    """Read the yes/no option ``name`` spelt as in ``FLAG_WORDS``; raise ValueError else."""
    try:
        return FLAG_WORDS[text.lower()]
    except KeyError:
        raise ValueError(f"{name} must be true or false, not {text!r}") from None
