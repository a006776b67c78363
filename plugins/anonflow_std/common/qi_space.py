"""The quasi-identifier space of generalized values (SPEC section 5): each QI's domain (the
ordered ones with their resolution, the unordered ones with their categories) and weights, as
L-clustering builds it and the generalized-value losses read it (:func:`qi_space`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from anonflow.api import InputError, TypedTable

from .encode import Continuous, Ordinal, encode
from .generalized import Domain, Generalized


def infer_resolution(values: np.ndarray) -> float:
    """The "+1" unit of an ordered real-valued attribute (SPEC section 5).

    1 when every value is an integer; else ``10^-k`` for the smallest ``k <= 9`` that makes
    every value an integer multiple of it (a value written with k decimals); else the
    smallest gap between two distinct values (1 for a constant column).
    """
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0 or np.all(v == np.round(v)):
        return 1.0
    for k in range(1, 10):
        scaled = v * 10.0 ** k
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-11 * np.maximum(1.0, np.abs(scaled))):
            return 10.0 ** -k
    u = np.unique(v)
    return float(np.diff(u).min()) if u.size > 1 else 1.0


@dataclass
class QISpace:
    """The quasi-identifiers of a table as L-clustering sees them.

    ``values`` ``(n, d_ord)`` (continuous values; ordinal ranks 0..m-1 in the declared
    order), ``codes`` ``(n, d_unord)`` (nominal and semantic codes), the :class:`Domain`
    (ordered attributes first), per unordered attribute its category strings by code, and
    per ordinal attribute its categories by rank.
    """

    names: list[str]
    domain: Domain
    values: np.ndarray
    codes: np.ndarray
    categories: list[list[str]]
    ordinal_labels: dict[str, list[str]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    def records(self) -> Generalized:
        return Generalized.from_records(self.values, self.codes, self.domain)


def qi_weights(names: list[str], weights: Mapping[str, Any] | None, what: str) -> dict[str, float]:
    out = {n: 1.0 for n in names}
    for key, w in (weights or {}).items():
        if key not in out:
            raise InputError(f"parameter '{what}': {key!r} is not a quasi-identifier (they are: "
                             f"{', '.join(names)})")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not np.isfinite(w) or w < 0:
            raise InputError(f"parameter '{what}': the weight of {key!r} must be a number >= 0, got {w!r}")
        out[key] = float(w)
    return out


def qi_resolutions(table: TypedTable, names: list[str], given: Mapping[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, r in (given or {}).items():
        if key not in names or table.typing.get(key).type != "continuous":
            cont = [n for n in names if table.typing.get(n).type == "continuous"] or ["none"]
            raise InputError(f"parameter 'resolution': {key!r} is not a continuous quasi-identifier (they are: "
                             f"{', '.join(cont)})")
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not np.isfinite(r) or r <= 0:
            raise InputError(f"parameter 'resolution': the resolution of {key!r} must be a number > 0, got {r!r}")
        out[key] = float(r)
    return out


def check_quasi(table: TypedTable, plugin: str) -> list[str]:
    quasi = table.typing.quasi
    if not quasi:
        raise InputError(f"{plugin} needs at least one quasi-identifier; name them under 'quasi' in the typing step")
    for name in quasi:
        typ = table.typing.get(name).type
        if typ not in ORDERED + UNORDERED:
            raise InputError(f"quasi-identifier {name!r} has no type; declare it continuous, ordinal, nominal or "
                             "semantic in the typing step")
    return quasi


def qi_space(table: TypedTable, weights: Mapping[str, Any] | None = None,
             resolution: Mapping[str, Any] | None = None, plugin: str = "l-clustering") -> QISpace:
    """Encode ``table``'s quasi-identifiers (SPEC section 1 types) as ordered/unordered
    attributes with their domain (SPEC section 5): continuous ``[min, max]`` of the data with
    the resolution unit of :func:`infer_resolution` unless ``resolution`` names one; ordinal
    ranks ``[0, m-1]`` over the declared order (unit 1); nominal and semantic sets over the
    categories present."""
    quasi = check_quasi(table, plugin)
    w = qi_weights(quasi, weights, "weights")
    res_given = qi_resolutions(table, quasi, resolution)
    enc = encode(table, quasi)
    ordered = [a for a in enc.attributes if table.typing.get(a.name).type in ORDERED]
    unordered = [a for a in enc.attributes if table.typing.get(a.name).type in UNORDERED]
    n = enc.n
    values = np.empty((n, len(ordered)), dtype=np.float64)
    res, dmin, dmax = [], [], []
    labels: dict[str, list[str]] = {}
    for i, a in enumerate(ordered):
        if isinstance(a, Continuous):
            values[:, i] = a.values
            res.append(res_given.get(a.name) or infer_resolution(a.values))
            dmin.append(a.lo)
            dmax.append(a.hi)
        else:
            assert isinstance(a, Ordinal)
            values[:, i] = a.codes
            res.append(1.0)
            dmin.append(0.0)
            dmax.append(float(max(a.m - 1, 0)))
            labels[a.name] = [str(c) for c in a.categories]
    codes = np.empty((n, len(unordered)), dtype=np.int64)
    cats = []
    for j, a in enumerate(unordered):
        codes[:, j] = a.codes
        cats.append([str(c) for c in a.categories])
    domain = Domain(res=np.array(res), dmin=np.array(dmin), dmax=np.array(dmax),
                    card=np.array([len(c) for c in cats], dtype=np.int64),
                    w_ord=np.array([w[a.name] for a in ordered]), w_unord=np.array([w[a.name] for a in unordered]),
                    ordered_names=tuple(a.name for a in ordered), unordered_names=tuple(a.name for a in unordered))
    return QISpace([a.name for a in ordered + unordered], domain, values, codes, cats, labels,
                   {q: table.typing.get(q).type for q in quasi})


ORDERED = ("continuous", "ordinal")


UNORDERED = ("nominal", "semantic")
