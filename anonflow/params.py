"""Parameter declarations for plugins and their validation.

A plugin declares its parameters as a tuple of :class:`Param`; the engine validates every
step's ``with:`` block against that declaration before anything runs, fills in defaults,
and rejects unknown names with a "did you mean" suggestion.
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import WorkflowError


class _Required:
    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return "REQUIRED"


REQUIRED: Any = _Required()

KINDS = ("int", "float", "str", "bool", "list", "dict", "any", "step")


class ParamError(ValueError):
    """A parameter value does not match its declaration (message says what was expected)."""


@dataclass(frozen=True)
class Param:
    """One declared parameter of a plugin.

    :param name: the key users write under ``with:``.
    :param kind: one of ``int``, ``float``, ``str``, ``bool``, ``list``, ``dict``, ``any``, or
        ``step``: the name of another source or step of the workflow whose table the plugin
        reads (a population table, say) through ``ctx.table(name)``; the workflow graph gets
        the dependency, and the step's fingerprint the table's content hash.
    :param default: the value used when the key is absent; :data:`REQUIRED` if it must be given.
    :param min: inclusive lower bound for numbers (``None``: unbounded).
    :param above: exclusive lower bound for numbers (``above=0``: strictly positive).
    :param max: inclusive upper bound for numbers.
    :param choices: the allowed values, if the parameter is an enumeration.
    :param items: for ``list`` parameters, the kind of each item.
    :param nullable: whether ``null`` is an accepted value.
    :param help: one line shown by ``anonflow plugins`` and in the docs.
    :param shape: for ``any`` (or ``list``/``dict``) parameters of the built-in steps: a type
        annotation (pydantic) of the value's structure, which the workflow file's schema
        checks and documents (:mod:`anonflow.workflow.model`).
    """

    name: str
    kind: str = "any"
    default: Any = REQUIRED
    min: float | None = None
    max: float | None = None
    above: float | None = None
    choices: tuple[Any, ...] | None = None
    items: str | None = None
    nullable: bool = False
    help: str = ""
    shape: Any = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"parameter {self.name!r}: kind must be one of {KINDS}, not {self.kind!r}")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> str:
        """A compact human description: ``k: int >= 2 (default 5)``."""
        text = f"{self.name}: {self.kind}"
        if self.kind == "list" and self.items:
            text = f"{self.name}: list of {self.items}"
        if self.choices:
            text += " in {" + ", ".join(map(str, self.choices)) + "}"
        if self.min is not None:
            text += f" >= {self.min}"
        if self.above is not None:
            text += f" > {self.above}"
        if self.max is not None:
            text += f" <= {self.max}"
        text += " (required)" if self.required else f" (default {self.default!r})"
        return text

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "required": self.required,
            "default": None if self.required else self.default,
            "min": self.min,
            "max": self.max,
            "above": self.above,
            "choices": list(self.choices) if self.choices else None,
            "items": self.items,
            "help": self.help,
        }

    def coerce(self, value: Any) -> Any:
        """Return ``value`` checked (and, for floats, converted) or raise :class:`ParamError`."""
        if value is None:
            if self.nullable or (not self.required and self.default is None):
                return None
            raise ParamError(f"expected {self._expected()}, got null")
        value = _coerce_kind(self.kind, value, self._expected)
        if self.kind == "list" and self.items:
            value = [_coerce_kind(self.items, v, lambda: f"a list of {self.items}") for v in value]
        if self.choices is not None and value not in self.choices:
            raise ParamError(f"expected one of {', '.join(map(repr, self.choices))}, got {value!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if self.min is not None and value < self.min:
                raise ParamError(f"expected {self._expected()}, got {value!r}")
            if self.above is not None and not value > self.above:
                raise ParamError(f"expected {self._expected()}, got {value!r}")
            if self.max is not None and value > self.max:
                raise ParamError(f"expected {self._expected()}, got {value!r}")
        return value

    def _expected(self) -> str:
        text = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false",
                "list": "a list", "dict": "a mapping", "any": "a value",
                "step": "the name of a source or step"}[self.kind]
        if self.min is not None and self.max is not None:
            text += f" between {_num(self.min)} and {_num(self.max)}"
        elif self.above is not None and self.max is not None:
            text += f" in ({_num(self.above)}, {_num(self.max)}]"
        elif self.min is not None:
            text += f" >= {_num(self.min)}"
        elif self.above is not None:
            text += f" > {_num(self.above)}"
        elif self.max is not None:
            text += f" <= {_num(self.max)}"
        return text


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


#: the integers a parameter may hold: 64 bits, as DuckDB and numpy hold them
INT_RANGE = (-(2**63), 2**63 - 1)


def _coerce_kind(kind: str, value: Any, expected) -> Any:
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ParamError(f"expected {expected()}, got {value!r}")
        if not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise ParamError(f"expected {expected()} of at most 64 bits, got {value!r}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParamError(f"expected {expected()}, got {value!r}")
        if not math.isfinite(float(value)):
            raise ParamError(f"expected a finite number, got {value!r}")
        return float(value)
    if kind == "step":
        if not isinstance(value, str) or not value.strip():
            raise ParamError(f"expected {expected()}, got {value!r}")
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise ParamError(f"expected {expected()}, got {value!r}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise ParamError(f"expected {expected()}, got {value!r}")
        return value
    if kind == "list":
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ParamError(f"expected {expected()}, got {value!r}")
        return list(value)
    if kind == "dict":
        if not isinstance(value, Mapping):
            raise ParamError(f"expected {expected()}, got {value!r}")
        return dict(value)
    return value


def suggest(name: str, candidates: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest candidate, or an empty string."""
    match = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def validate_params(declared: Iterable[Param], given: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``given`` against ``declared``; return the full parameter dict with defaults.

    Raises :class:`ParamError` naming the parameter and what was expected.
    """
    declared = list(declared)
    by_name = {p.name: p for p in declared}
    for key in given:
        if not isinstance(key, str):  # YAML reads `0:` or `true:` as a number or a boolean
            raise ParamError(f"parameter name {key!r} is not text; parameter names are words such as "
                             f"{', '.join(sorted(by_name)[:3]) or 'k'}")
        if key not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise ParamError(f"unknown parameter {key!r}{suggest(key, by_name)}; known parameters: {known}")
    out: dict[str, Any] = {}
    for p in declared:
        if p.name in given:
            try:
                out[p.name] = p.coerce(given[p.name])
            except ParamError as exc:
                raise ParamError(f"parameter {p.name!r}: {exc}") from None
        elif p.required:
            raise ParamError(f"missing required parameter {p.name!r} ({p.describe()})")
        else:
            out[p.name] = p.default
    return out


def metric_entries(value: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    """An ``evaluate`` step's ``metrics`` parameter as (name, parameters) pairs:
    ``[a, {b: {k: 5}}]`` or ``{a: {}, b: {k: 5}}`` -> ``[(a, {}), (b, {k: 5})]``."""
    if isinstance(value, Mapping):
        value = [{k: v} for k, v in value.items()]
    if isinstance(value, str):
        value = [value]
    out = []
    for item in value or []:
        if isinstance(item, str):
            out.append((item, {}))
        elif isinstance(item, Mapping) and len(item) == 1:
            (name, p), = item.items()
            if p is not None and not isinstance(p, Mapping):
                raise WorkflowError(f"metric {name!r}: parameters must be a mapping, got {p!r}", where=where)
            out.append((str(name), dict(p or {})))
        else:
            raise WorkflowError(f"'metrics' entries must be a name or {{name: {{param: value}}}}, got {item!r}",
                                where=where)
    if not out:
        raise WorkflowError("'metrics' must name at least one metric", where=where)
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise WorkflowError("a metric is listed twice", where=where)
    return out


def relative_paths(value: Any, base: Path) -> Any:
    """``value`` with every string naming an existing absolute path rewritten relative to
    ``base`` (recursively through lists and mappings): parameters that name files (hierarchy
    files, gradings) then read the same wherever the workflow's folder is."""
    if isinstance(value, str):
        if len(value) > 1 and os.path.isabs(value) and os.path.exists(value):
            return os.path.relpath(value, base)
        return value
    if isinstance(value, dict):
        return {k: relative_paths(v, base) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [relative_paths(v, base) for v in value]
    return value
