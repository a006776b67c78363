"""What ``anonflow verify`` finds: one finding ``{ok, what, detail}`` per check
(:class:`Findings`), and how values are shown and compared in them."""

from __future__ import annotations

import math
from typing import Any


class Findings:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        #: with --rerun: ``{"verdict": identical | same-tables-different-code | different | failed |
        #: not-attempted, "versions": [...], "code": [...]}`` (see :func:`compare_rerun`)
        self.rerun: dict[str, Any] | None = None

    def add(self, ok: bool, what: str, detail: str, show: bool = False) -> None:
        """``show``: a finding verify prints even when it holds (the signature status, the
        lossy-join k figures)."""
        self.items.append({"ok": bool(ok), "what": what, "detail": detail, **({"show": True} if show else {})})

    @property
    def ok(self) -> bool:
        return all(i["ok"] for i in self.items)


def short(h: Any) -> str:
    return str(h)[:16] + "..." if isinstance(h, str) and len(h) > 16 else repr(h)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
    return a == b
