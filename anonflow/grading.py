"""Sensitivity grading of a sensitive attribute (SPEC section 2, seed 002 Def. 5-7) and the
sensitivity distance Ds (SPEC section 7).

A grading assigns every value of the sensitive attribute to a level L1 (most sensitive) ..
L_lambda, each with a frequency bound alpha_i, and gives pair weights W(m) used by Ds. It is
declared in a workflow's typing step, inline or as a YAML file::

    levels:
      - {alpha: 0.20, values: [Protective-serv, Armed-Forces]}     # level 1
      - {alpha: 0.30, values: [Exec-managerial, Prof-specialty, Adm-clerical]}
    pair_weights: {2: 0.85}                                         # W(m); default 1
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from .errors import InputError, WorkflowError
from .safeyaml import load_yaml


@dataclass(frozen=True)
class Level:
    number: int
    alpha: float
    values: tuple[str, ...]


@dataclass(frozen=True)
class Grading:
    levels: tuple[Level, ...]
    #: W(m) for m = 2..lambda: the weight of a pair whose less sensitive level is m.
    pair_weights: dict[int, float] = field(default_factory=dict, hash=False)
    source: str = "inline"

    @property
    def size(self) -> int:
        return len(self.levels)

    def weight(self, m: int) -> float:
        return float(self.pair_weights.get(m, 1.0))

    def value_levels(self) -> dict[str, int]:
        return {v: lv.number for lv in self.levels for v in lv.values}

    def alphas(self) -> np.ndarray:
        """alpha of level i at index i (index 0 unused)."""
        return np.array([np.nan] + [lv.alpha for lv in self.levels])

    def levels_of(self, values: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Level number of each value (0 where a value is not graded), vectorized."""
        mapping = self.value_levels()
        keys = pa.array(list(mapping), type=pa.string())
        idx = pc.index_in(pc.cast(values, pa.string()), value_set=keys)
        lv = np.array([0] + list(mapping.values()), dtype=np.int64)
        return lv[pc.fill_null(pc.add(idx, 1), 0).to_numpy(zero_copy_only=False)]

    def to_json(self) -> dict[str, Any]:
        return {"levels": [{"alpha": lv.alpha, "values": list(lv.values)} for lv in self.levels],
                "pair_weights": {str(k): v for k, v in sorted(self.pair_weights.items())}, "source": self.source}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Grading":
        return parse_grading(data, where="grading", source=data.get("source", "inline"))


def parse_grading(data: Any, *, where: str, source: str = "inline") -> Grading:
    """Validate a grading mapping (see module docstring); errors name ``where``."""
    if not isinstance(data, Mapping):
        raise WorkflowError("a grading must be a mapping with 'levels' (and optional 'pair_weights')", where=where)
    unknown = set(data) - {"levels", "pair_weights", "source", "sha256", "description"}
    if unknown:
        raise WorkflowError(f"grading: unknown key {sorted(unknown)[0]!r}; expected levels, pair_weights", where=where)
    raw = data.get("levels")
    if not isinstance(raw, list) or not raw:
        raise WorkflowError("grading: 'levels' must be a non-empty list of {alpha, values}", where=where)
    levels, seen = [], {}
    for i, lv in enumerate(raw, start=1):
        if not isinstance(lv, Mapping) or set(lv) - {"alpha", "values", "name"} or "values" not in lv:
            raise WorkflowError(f"grading level {i}: expected {{alpha: number, values: [...]}}", where=where)
        alpha = lv.get("alpha", 1.0)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= 1:
            raise WorkflowError(f"grading level {i}: alpha must be in (0, 1], got {alpha!r}", where=where)
        values = [str(v) for v in lv["values"]]
        for v in values:
            if v in seen:
                raise WorkflowError(f"grading: value {v!r} is in level {seen[v]} and level {i}", where=where)
            seen[v] = i
        levels.append(Level(i, float(alpha), tuple(values)))
    weights = {}
    for k, w in (data.get("pair_weights") or {}).items():
        try:
            m = int(k)
        except (TypeError, ValueError):
            raise WorkflowError(f"grading: pair_weights keys are level numbers, got {k!r}", where=where) from None
        if not 2 <= m <= len(levels) or isinstance(w, bool) or not isinstance(w, (int, float)) or w < 0:
            raise WorkflowError(f"grading: pair_weights[{k}] must be a number >= 0 for a level in 2..{len(levels)}",
                                where=where)
        weights[m] = float(w)
    return Grading(tuple(levels), weights, source)


#: the largest grading file read (bytes)
MAX_GRADING_BYTES = 10 * 1024 * 1024


def load_grading(spec: Any, base_dir: Path, *, where: str) -> dict[str, Any]:
    """Resolve a grading given inline or as a YAML file path; return its JSON form (with the
    file's sha256, so a changed file changes every fingerprint that depends on it)."""
    if isinstance(spec, str):
        path = (base_dir / spec).resolve()
        if not path.exists():
            raise WorkflowError(f"grading file not found: {path}", where=where)
        if not path.is_file():  # a folder, device (/dev/zero never ends) or FIFO (blocks)
            raise WorkflowError(f"grading file {path} is not a regular file", where=where)
        if path.stat().st_size > MAX_GRADING_BYTES:
            raise WorkflowError(f"grading file {path} is {path.stat().st_size:,} bytes; a grading holds at most "
                                f"{MAX_GRADING_BYTES:,}", where=where)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise WorkflowError(f"grading file {path} cannot be read: {exc}", where=where) from None
        try:
            data = load_yaml(text)
        except RecursionError:
            raise WorkflowError(f"grading file {path} nests lists or mappings too deeply", where=where) from None
        except yaml.YAMLError as exc:
            raise WorkflowError(f"grading file {path} is not valid YAML: {str(exc).splitlines()[0]}",
                                where=where) from None
        # recorded relative to the workflow's folder (the content is pinned by the sha256), so
        # the typing, and every hash downstream of it, does not depend on where the checkout is
        grading = parse_grading(data, where=f"{where}: {path}", source=Path(os.path.relpath(path, base_dir)).as_posix())
        out = grading.to_json()
        out["sha256"] = hashlib.sha256(text.encode()).hexdigest()
        return out
    return parse_grading(spec, where=where).to_json()


def check_grading_against(grading: Grading, values: pa.ChunkedArray, column: str, where: str) -> list[str]:
    """Every value present must be graded (error otherwise); return notes for graded values
    that never occur in the data."""
    distinct = pc.unique(pc.drop_null(values).cast(pa.string()))
    graded = pa.array(list(grading.value_levels()), type=pa.string())
    missing = pc.filter(distinct, pc.invert(pc.is_in(distinct, value_set=graded)))
    if len(missing):
        raise InputError(f"the grading of {column!r} leaves the value {missing[0].as_py()!r} unassigned "
                         f"({len(missing)} value(s) in all); add it to a level", where=where)
    absent = pc.filter(graded, pc.invert(pc.is_in(graded, value_set=distinct)))
    return [f"grading of {column!r} names {v.as_py()!r}, which does not occur in the data" for v in absent]


def sensitivity_distance(counts: np.ndarray, grading: Grading, *, normalized: bool = False) -> np.ndarray:
    """Ds(E) for many classes at once (SPEC section 7).

    ``counts`` has shape (g, lambda + 1): ``counts[e, i]`` = records of level i in class e
    (column 0 unused). Ds(E) = sum over record pairs a < b of W(max(l_a, l_b)) * |l_a - l_b|,
    divided by the number of pairs q(q-1)/2; ``normalized`` also divides by lambda - 1.
    Classes with fewer than two records have Ds = 0.
    """
    counts = np.asarray(counts, dtype=np.float64)
    lam = counts.shape[1] - 1
    i = np.arange(lam + 1)
    diff = np.abs(i[:, None] - i[None, :]).astype(np.float64)
    w = np.array([0.0] + [grading.weight(m) for m in range(1, lam + 1)])
    pair = diff * w[np.maximum(i[:, None], i[None, :])]
    pair[0, :] = pair[:, 0] = 0.0
    total = 0.5 * np.einsum("gi,ij,gj->g", counts, pair, counts)  # each unordered pair once
    q = counts[:, 1:].sum(axis=1)
    pairs = q * (q - 1) / 2
    out = np.divide(total, pairs, out=np.zeros_like(total), where=pairs > 0)
    if normalized and lam > 1:
        out /= lam - 1
    return out
