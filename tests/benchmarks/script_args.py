"""Command-line options shared by the results scripts (run as ``python tests/benchmarks/X.py``,
so this folder is first on ``sys.path``)."""

from __future__ import annotations

from typing import Any, Callable


def listed_option(args: list[str], name: str, default: Any, kind: Callable[[str], Any] = str) -> Any:
    """Take ``name a,b,c`` out of ``args`` and return ``(kind(a), kind(b), kind(c))``, or
    ``default`` when ``name`` is not given."""
    if name in args:
        i = args.index(name)
        value = tuple(kind(x) for x in args[i + 1].split(","))
        del args[i: i + 2]
        return value
    return default
