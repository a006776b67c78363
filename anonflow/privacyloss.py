"""What a differentially private step spends, as the engine checks and records it.

A plugin states its loss from its parameters alone (:meth:`anonflow.api.Plugin.privacy_loss`):
``{"measure": "pure", "epsilon": e}``, ``{"measure": "approximate", "epsilon": e, "delta": d}``
or ``{"measure": "zcdp", "rho": r}``, with any other figures of its guarantee beside them.
:func:`check_loss` holds such a declaration to that form; :class:`Charge` is one loss charged
to one source, the unit the store's privacy ledger keeps (:mod:`anonflow.store.privacy_ledger`)
and the composition adds up (:mod:`anonflow.dpcompose`, which imports OpenDP). This module
imports nothing of OpenDP, so a workflow without a differentially private step never loads it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

from .canonjson import canonical_json

#: the measures a loss is stated in, and the figures each requires
MEASURES: dict[str, tuple[str, ...]] = {"pure": ("epsilon",), "approximate": ("epsilon", "delta"), "zcdp": ("rho",)}


def _figure(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    value = float(value)
    if name == "delta":
        if not 0.0 <= value < 1.0:
            raise ValueError(f"delta must be in [0, 1), got {value!r}")
    elif value <= 0.0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


def check_loss(declared: Any) -> dict[str, Any]:
    """``declared`` (what :meth:`~anonflow.api.Plugin.privacy_loss` returned, not None) as plain
    JSON data, keys sorted; raise :class:`ValueError` (one line) when it is not a known measure
    with finite figures (ε, ρ > 0; δ in [0, 1)) or holds something that is not JSON data."""
    if not isinstance(declared, Mapping):
        raise ValueError(f"expected a mapping with 'measure' one of {', '.join(MEASURES)}, got "
                         f"{type(declared).__name__}")
    measure = declared.get("measure")
    if measure not in MEASURES:
        raise ValueError(f"'measure' must be one of {', '.join(MEASURES)}, got {measure!r}")
    for name in MEASURES[measure]:
        if name not in declared:
            raise ValueError(f"the {measure} measure needs {', '.join(MEASURES[measure])}; {name!r} is missing")
    others = {"epsilon", "delta", "rho"} - set(MEASURES[measure])
    for name in sorted(others & set(declared)):
        raise ValueError(f"the {measure} measure states {', '.join(MEASURES[measure])}, not {name!r}")
    out = dict(declared)
    for name in MEASURES[measure]:
        out[name] = _figure(name, declared[name])
    try:
        return json.loads(canonical_json(out, strict=True))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not JSON data: {exc}") from None


def check_budget(budget: Mapping[str, Any]) -> tuple[float, float]:
    """A declared budget ``{epsilon, delta}`` (δ default 0) as (ε, δ); ValueError if malformed
    (the workflow schema has checked it already)."""
    return _figure("epsilon", budget.get("epsilon")), _figure("delta", budget.get("delta", 0.0) or 0.0)


@dataclass(frozen=True)
class Charge:
    """One step's loss charged to one source: the measure and its figures (ε and δ for pure
    and approximate losses, ρ for zCDP ones; the others None)."""

    measure: str
    epsilon: float | None = None
    delta: float | None = None
    rho: float | None = None

    @classmethod
    def of(cls, loss: Mapping[str, Any]) -> "Charge":
        """The charge of a checked loss (:func:`check_loss`)."""
        if loss["measure"] == "zcdp":
            return cls("zcdp", rho=float(loss["rho"]))
        if loss["measure"] == "pure":
            return cls("pure", epsilon=float(loss["epsilon"]), delta=0.0)
        return cls("approximate", epsilon=float(loss["epsilon"]), delta=float(loss["delta"]))


def shown_loss(loss: Mapping[str, Any]) -> str:
    """A loss or a composed spend in a message: ``ε=1, δ=1e-06`` / ``ρ=0.125``."""
    parts = []
    for key, sign in (("epsilon", "ε"), ("delta", "δ"), ("rho", "ρ")):
        if loss.get(key) is not None:
            parts.append(f"{sign}={loss[key]:.6g}")
    return ", ".join(parts)
