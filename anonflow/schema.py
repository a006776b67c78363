"""Attribute roles and types (SPEC section 1).

Every column of a typed table has a *role*; every quasi-identifier (and, where useful,
the sensitive attribute and label) has a *type*. The typing travels with each table
through the workflow and is stored beside it in the DuckDB store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable

ROLES = ("identifier", "quasi", "sensitive", "insensitive", "label", "weight")
TYPES = ("continuous", "ordinal", "nominal", "semantic")

#: Column that carries each record's original position (0-based) through the workflow.
ROW = "_row"
#: Column that carries the class (group) id assigned by an algorithm.
CLASS = "_class"
#: Column that carries each record's fragment, added by the ``partition`` step.
FRAGMENT = "_fragment"
RESERVED = (ROW, CLASS, FRAGMENT)
#: The category a missing value of a text column becomes under the typing step's
#: ``missing: category``.
MISSING_CATEGORY = "?"


@dataclass(frozen=True)
class Attribute:
    """Role and type of one column."""

    name: str
    role: str
    type: str | None = None
    #: ordinal: the categories in increasing order.
    order: tuple[str, ...] | None = None
    #: ordinal: step weights W(j-1, j), one fewer than ``order`` (default all 1).
    weights: tuple[float, ...] | None = None
    #: how the type was decided: "declared" or "inferred".
    source: str = "declared"
    #: type-specific settings: semantic ``beta`` and ``w12`` (code hierarchy tree weights,
    #: SPEC section 2); a sensitive attribute's ``grading`` (:class:`anonflow.grading.Grading` as JSON).
    options: dict[str, Any] = field(default_factory=dict, compare=True, hash=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "role": self.role, "type": self.type}
        if self.order is not None:
            out["order"] = list(self.order)
        if self.weights is not None:
            out["weights"] = list(self.weights)
        out["source"] = self.source
        if self.options:
            out["options"] = self.options
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Attribute":
        return cls(
            name=data["name"],
            role=data["role"],
            type=data.get("type"),
            order=tuple(data["order"]) if data.get("order") is not None else None,
            weights=tuple(data["weights"]) if data.get("weights") is not None else None,
            source=data.get("source", "declared"),
            options=dict(data.get("options") or {}),
        )


@dataclass(frozen=True)
class Typing:
    """The attributes of a typed table, in column order."""

    attributes: tuple[Attribute, ...] = field(default_factory=tuple)
    #: how missing values were handled: "error", "drop" or "category".
    missing: str = "error"

    def __post_init__(self) -> None:
        names = [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate attribute names in typing: {names}")

    def names(self, role: str | None = None) -> list[str]:
        return [a.name for a in self.attributes if role is None or a.role == role]

    @property
    def quasi(self) -> list[str]:
        return self.names("quasi")

    @property
    def sensitive(self) -> list[str]:
        return self.names("sensitive")

    @property
    def label(self) -> list[str]:
        return self.names("label")

    @property
    def weight(self) -> str | None:
        """The column holding each record's sampling weight (role ``weight``), or None."""
        names = self.names("weight")
        return names[0] if names else None

    def get(self, name: str) -> Attribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(a.name == name for a in self.attributes)

    def replace(self, attributes: Iterable[Attribute]) -> "Typing":
        return Typing(tuple(attributes), self.missing)

    def to_json(self) -> dict[str, Any]:
        return {"attributes": [a.to_json() for a in self.attributes], "missing": self.missing}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "Typing":
        if not data:
            return cls()
        return cls(tuple(Attribute.from_json(a) for a in data["attributes"]), data.get("missing", "error"))
