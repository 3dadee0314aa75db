"""Safe identifiers: every name in generated source passes through here.

Names come from user code (argument names, module paths such as `layers.0.weight`, op names). They are
reduced to `[A-Za-z0-9_]`, kept off Python keywords and builtins, and made unique, so nothing a user wrote is
spliced into source unescaped.

    >>> Namer().identifier("layers.0.weight")
    'layers_0_weight'
"""

from __future__ import annotations

import builtins
import keyword
import re

_RESERVED = set(keyword.kwlist) | set(dir(builtins)) | {"tl", "triton", "torch", "libdevice", "math"}


def sanitize(raw: str) -> str:
    """Any text -> a valid Python identifier (not necessarily unique)."""
    text = re.sub(r"[^0-9a-zA-Z_]", "_", str(raw)).strip("_") or "value"
    if text[0].isdigit():
        text = f"v_{text}"
    if text in _RESERVED or text.startswith("__"):
        text = f"{text}_"
    return text


def comment(raw: str) -> str:
    """Text safe to put after `#` on one line."""
    return re.sub(r"[\r\n\x00-\x1f]", " ", str(raw))


class Namer:
    """Hands out unique identifiers; asking again for the same key returns the same name."""

    def __init__(self, reserved: set[str] | None = None) -> None:
        self.taken: set[str] = set(reserved or ())
        self.names: dict[str, str] = {}

    def identifier(self, raw: str, key: str | None = None) -> str:
        key = raw if key is None else key
        if key in self.names:
            return self.names[key]
        base = sanitize(raw)
        name, number = base, 1
        while name in self.taken:
            name, number = f"{base}_{number}", number + 1
        self.taken.add(name)
        self.names[key] = name
        return name
