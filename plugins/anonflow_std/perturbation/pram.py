"""PRAM, the post-randomization method (Gouweleeuw, Kooiman, Willenborg & de Wolf 1998), as
sdcMicro's ``pram()`` builds it (R/pram.R, ``calcTransitionMatrix``).

Each value of a categorical column is replaced by a category drawn from the row of a transition
matrix that its own category selects. The matrix, per column (and per stratum), is built from the
column's relative frequencies ``p`` over its ``L`` categories:

1. ``P``: the diagonal ``d_i`` drawn uniformly in ``[pd, 1]`` per category (sdcMicro's
   ``runif(L, min = pd, max = 1)``; ``diagonal: fixed`` takes ``d_i = pd``), the rest of row ``i``
   spread evenly, ``(1 - d_i) / (L - 1)``;
2. ``Q``, the inverse (Bayes) transition: ``Q[k, j] = P[j, k] p_j / sum_l p_l P[l, k]`` (sdcMicro
   divides the counts by the sum of the factor's codes, not their number: a constant, which
   cancels here);
3. ``R = P Q``, which is invariant: ``p' R = p'`` (so the expected frequencies after PRAM equal
   the original's);
4. ``Rs = alpha R + (1 - alpha) I``, still invariant, with more weight on keeping a value.

``invariant: false`` uses ``P`` itself; an explicit ``matrix`` is used as given. A value is drawn
by one uniform per record and an inverse-CDF lookup in the cumulative row of its (stratum,
category): one ``searchsorted`` over all records.

``linked`` columns (sdcMicro's "ghost" variables, which its local suppression treats together
with their key variable; its ``pram`` does not) change together with their column: a record
whose value changed to category ``c`` takes its linked columns' values from one original record
with category ``c`` (in its stratum when the stratum has one), drawn at random, so the linked
columns stay consistent with the new value (a function of the column stays that function).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import (CLASS, MISSING_CATEGORY, ROW, Algorithm, InputError, Param, StepContext, TypedTable,
                          generalization, value_codes, value_keys)

from .. import __version__
from .noise import publish_columns

#: tolerance of a given matrix row's sum (sdcMicro uses the machine epsilon, too strict for
#: probabilities written as decimals)
ROW_SUM_TOLERANCE = 1e-9
#: the most cells (strata x categories x categories) of one column's transition matrices: beyond,
#: the step is refused in one line (a column of 20,000 distinct values would need 3.2 GB)
MAX_MATRIX_CELLS = 25_000_000

#: the largest combined stratum code (the product of the strata columns' value counts, each plus
#: one for null): beyond, int64 codes would overflow, so the step is refused
MAX_STRATA_CODE = 2 ** 62

#: the largest number of categories whose realised matrices are recorded in the step's fitted
FITTED_CATEGORIES = 50
#: ... and the most matrix cells (over all strata) recorded per column
FITTED_CELLS = 20000


# -- the transition matrices -------------------------------------------------------------------

def base_matrix(diagonal: np.ndarray) -> np.ndarray:
    """sdcMicro's ``P``: ``diagonal`` on the diagonal, each row's rest spread evenly over the
    other ``L - 1`` categories. One category: ``[[1]]``."""
    d = np.asarray(diagonal, dtype=np.float64)
    L = d.size
    if L == 1:
        return np.ones((1, 1))
    P = np.repeat(((1.0 - d) / (L - 1))[:, None], L, axis=1)
    np.fill_diagonal(P, d)
    return P


def invariant_matrix(p: np.ndarray, P: np.ndarray, alpha: float) -> np.ndarray:
    """sdcMicro's invariant ``Rs = alpha P Q + (1 - alpha) I`` for relative frequencies ``p``
    (summing to 1) and a transition matrix ``P``, where ``Q[k, j] = P[j, k] p_j / s_k`` and
    ``s_k = sum_j p_j P[j, k]`` (``p' P``). A category nobody can be moved to (``s_k = 0``) gets
    ``Q``'s identity row: it is never reached, and the rows still sum to 1."""
    p = np.asarray(p, dtype=np.float64)
    L = p.size
    s = p @ P
    Q = np.eye(L)
    ok = s > 0
    Q[ok] = (P[:, ok] * p[:, None]).T / s[ok, None]
    R = P @ Q
    return alpha * R + (1.0 - alpha) * np.eye(L)


def draw_codes(codes: np.ndarray, rows: np.ndarray, matrices: np.ndarray, u: np.ndarray) -> np.ndarray:
    """New category codes: record ``i`` (``codes[i] >= 0``) draws from row ``rows[i]`` of the
    stacked matrices ``matrices`` (``(m, L)`` rows, each summing to 1) by inverse CDF of the
    uniform ``u[i]``: the first ``j`` whose cumulative probability exceeds ``u[i]``. Vectorized:
    row ``r``'s cumulative probabilities are shifted by ``r`` into one increasing sequence and
    searched once (a category of probability 0 is never drawn: its cumulative value equals the
    previous one). Records with a negative code keep it."""
    m, L = matrices.shape
    C = np.cumsum(matrices, axis=1)
    C[:, -1] = 1.0  # the last category takes whatever rounding left
    C = np.minimum(C, 1.0)
    flat = (C + np.arange(m, dtype=np.float64)[:, None]).ravel()
    out = codes.copy()
    valid = codes >= 0
    r = rows[valid]
    pos = np.searchsorted(flat, r + u[valid], side="right")
    out[valid] = np.minimum(pos - r * L, L - 1)
    return out


# -- parameters ----------------------------------------------------------------------------------

def _per_column(value: Any, column: str, name: str, default: float) -> float:
    """``pd`` / ``alpha`` for one column: one number, or a mapping column -> number."""
    if isinstance(value, Mapping):
        value = value.get(column, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"pram: parameter {name!r} must be a number in [0, 1] or a mapping column -> number, "
                         f"got {value!r} for column {column!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise InputError(f"pram: parameter {name!r} = {value!r} for column {column!r} is outside [0, 1]")
    return float(value)


def _names(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InputError(f"pram: parameter {name!r} must be a column name or a list of column names, got {value!r}")
    return list(value)


def pram_columns(params: Mapping[str, Any], table: TypedTable | None = None) -> list[str]:
    """The columns PRAM changes: ``columns``, or (with the table) its nominal quasi-identifiers."""
    cols = _names(params.get("columns"), "columns")
    if cols or table is None:
        return cols
    return [a.name for a in table.typing.attributes if a.role == "quasi" and a.type == "nominal"]


def linked_columns(params: Mapping[str, Any]) -> dict[str, list[str]]:
    """``linked`` as column -> [linked columns], checked for shape."""
    value = params.get("linked") or {}
    if not isinstance(value, Mapping):
        raise InputError(f"pram: parameter 'linked' must be a mapping column -> [linked columns], got {value!r}")
    return {str(k): _names(v, f"linked.{k}") for k, v in value.items()}


def explicit_matrices(params: Mapping[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """``matrix`` as column -> {category: {category: probability}} (keys as text), checked for
    shape, signs and row sums (the categories are checked against the data in :meth:`Pram.run`)."""
    value = params.get("matrix") or {}
    if not isinstance(value, Mapping):
        raise InputError(f"pram: parameter 'matrix' must be a mapping column -> {{category: {{category: "
                         f"probability}}}}, got {value!r}")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for column, rows in value.items():
        if not isinstance(rows, Mapping) or not rows:
            raise InputError(f"pram: matrix for column {column!r} must map each category to "
                             f"{{category: probability}}, got {rows!r}")
        out[str(column)] = {}
        for source, row in rows.items():
            if not isinstance(row, Mapping):
                raise InputError(f"pram: matrix row {source!r} of column {column!r} must map categories to "
                                 f"probabilities, got {row!r}")
            probs = {}
            for target, prob in row.items():
                if isinstance(prob, bool) or not isinstance(prob, (int, float)) or not 0.0 <= float(prob) <= 1.0:
                    raise InputError(f"pram: matrix entry {column!r}[{source!r}][{target!r}] = {prob!r} is not a "
                                     "probability in [0, 1]")
                probs[str(target)] = float(prob)
            total = sum(probs.values())
            if abs(total - 1.0) > ROW_SUM_TOLERANCE:
                raise InputError(f"pram: matrix row {source!r} of column {column!r} sums to {total:.12g}, not 1")
            out[str(column)][str(source)] = probs
    return out


def declared(params: Mapping[str, Any], table: TypedTable | None = None) -> dict[str, dict[str, Any]]:
    """:meth:`Pram.perturbs`: per changed column what it underwent, from the parameters."""
    matrices = explicit_matrices(params)
    strata = _names(params.get("strata"), "strata")
    links = linked_columns(params)
    out: dict[str, dict[str, Any]] = {}
    for col in pram_columns(params, table):
        what: dict[str, Any] = {"kind": "randomize", "method": "pram"}
        if col in matrices:
            what["matrix"] = matrices[col]
        else:
            what.update(invariant=bool(params.get("invariant", True)),
                        pd=_per_column(params.get("pd", 0.8), col, "pd", 0.8),
                        diagonal=str(params.get("diagonal", "uniform")))
            if what["invariant"]:
                what["alpha"] = _per_column(params.get("alpha", 0.5), col, "alpha", 0.5)
        what["strata"] = list(strata)
        if links.get(col):
            what["linked"] = list(links[col])
        out[col] = what
        for other in links.get(col, []):
            out[other] = {"kind": "randomize", "method": "pram", "linked_to": col, "strata": list(strata)}
    return out


# -- the algorithm -------------------------------------------------------------------------------

def _categories(table: TypedTable, col: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The categories of the column ``col`` of ``table`` (sorted by their text; the typing's
    missing-value category and nulls left out) and each record's code into them (-1: missing,
    kept as it is)."""
    dictionary, indices = value_codes(col)
    keys = value_keys(dictionary)
    order = np.asarray(pc.array_sort_indices(keys).to_numpy(zero_copy_only=False), dtype=np.int64)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    lookup_rank = np.append(rank, -1)
    codes = lookup_rank[indices]
    sorted_dict = dictionary.take(pa.array(order))
    sorted_keys = keys.take(pa.array(order)).to_pylist()
    if table.typing.missing == "category" and MISSING_CATEGORY in sorted_keys:
        j = sorted_keys.index(MISSING_CATEGORY)
        codes = np.where(codes == j, -1, np.where(codes > j, codes - 1, codes))
        keep = np.delete(np.arange(len(sorted_keys)), j)
        sorted_dict = sorted_dict.take(pa.array(keep))
    return sorted_dict, codes


def _strata(table: TypedTable, strata: list[str]) -> tuple[np.ndarray, list[list[Any]]]:
    """Each record's stratum (0 .. S-1, strata ordered by their values' codes) and each
    stratum's values."""
    n = table.num_rows
    if not strata:
        return np.zeros(n, dtype=np.int64), [[]]
    key = np.zeros(n, dtype=np.int64)
    dicts = []
    span = 1
    for name in strata:
        dictionary, indices = value_codes(table.column(name))
        keys = value_keys(dictionary)
        span *= len(keys) + 1
        if span > MAX_STRATA_CODE:  # the combined code would overflow: far more strata than records anyway
            raise InputError(f"pram: the strata columns {', '.join(map(repr, strata))} have too many combinations "
                             f"of values to number ({span:.3g}); stratify by fewer or coarser columns")
        order = np.asarray(pc.array_sort_indices(keys, null_placement="at_end").to_numpy(zero_copy_only=False),
                           dtype=np.int64)
        rank = np.empty(order.size + 1, dtype=np.int64)
        rank[order] = np.arange(order.size)
        rank[-1] = order.size  # null: a stratum of its own, after the others
        dicts.append(keys.take(pa.array(order)).to_pylist() + [None])
        key = key * (order.size + 1) + rank[indices]
    uniq, inverse = np.unique(key, return_inverse=True)
    labels = []
    for k in uniq.tolist():
        parts = []
        for d in reversed(dicts):
            parts.append(d[k % len(d)])
            k //= len(d)
        labels.append(parts[::-1])
    return inverse.reshape(-1).astype(np.int64), labels


class Pram(Algorithm):
    name = "pram"
    version = __version__
    description = ("PRAM (post-randomization) of categorical columns, as sdcMicro's pram(): the invariant "
                   "transition matrix from pd and alpha (or one given), optional strata and linked columns.")
    per_fragment = False
    params = (
        Param("columns", "list", default=None, nullable=True, items="str",
              help="the categorical (nominal or ordinal) columns to randomize (default: the nominal quasi-identifiers)"),
        Param("pd", "any", default=0.8,
              help="lowest diagonal of sdcMicro's matrix P (each category's drawn in [pd, 1]): one number or a "
                   "mapping column -> number (default 0.8, sdcMicro's)"),
        Param("alpha", "any", default=0.5,
              help="weight of the invariant matrix R against the identity, Rs = alpha R + (1 - alpha) I: one "
                   "number or a mapping column -> number (default 0.5, sdcMicro's)"),
        Param("diagonal", "str", default="uniform", choices=("uniform", "fixed"),
              help="P's diagonal: drawn uniformly in [pd, 1] per category (sdcMicro) or exactly pd"),
        Param("invariant", "bool", default=True,
              help="use the invariant matrix Rs (expected frequencies preserved), else P itself"),
        Param("matrix", "dict", default=None, nullable=True,
              help="explicit transition matrices: column -> {category: {category: probability}} (rows sum to 1); "
                   "used as given"),
        Param("strata", "list", default=None, nullable=True, items="str",
              help="columns whose combinations are strata: a matrix per stratum from its own frequencies"),
        Param("linked", "dict", default=None, nullable=True,
              help="column -> [columns] changed with it (sdcMicro's ghost variables): a changed record takes them "
                   "from an original record with its new category"),
        Param("record_matrices", "bool", default=True,
              help="record the realised matrices in the step's fitted (up to 50 categories); they reveal each "
                   "stratum's category frequencies (its stationary distribution)"),
    )

    def perturbs(self, params: Mapping[str, Any], table: TypedTable | None = None) -> dict[str, dict[str, Any]]:
        return declared(params, table)

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        self._resolve(params, table)

    def _resolve(self, params: Mapping[str, Any], table: TypedTable) -> tuple[list[str], list[str],
                                                                               dict[str, list[str]],
                                                                               dict[str, dict[str, dict[str, float]]]]:
        """The columns, strata, links and matrices, checked against the table (one line each)."""
        columns = pram_columns(params, table)
        if not columns:
            raise InputError("pram needs categorical columns: name them in 'columns' or type nominal "
                             "quasi-identifiers in the typing step")
        strata = _names(params.get("strata"), "strata")
        links = linked_columns(params)
        matrices = explicit_matrices(params)
        if len(set(columns)) != len(columns):
            raise InputError(f"pram: parameter 'columns' names a column twice: {columns}")
        for col in columns:
            if col not in table.columns or col in (ROW, CLASS):
                raise InputError(f"pram: column {col!r} (parameter 'columns') is not in the table")
            attr = table.typing.get(col) if col in table.typing else None
            if attr is None or attr.type not in ("nominal", "ordinal"):
                typed = "untyped" if attr is None or attr.type is None else f"typed {attr.type}"
                raise InputError(f"pram randomizes categories, but column {col!r} is {typed}; type it nominal or "
                                 f"ordinal in the typing step")
            if generalization(table, col):
                raise InputError(f"pram: column {col!r} holds generalized labels from an earlier step; run pram "
                                 "before generalizing")
            _per_column(params.get("pd", 0.8), col, "pd", 0.8)
            _per_column(params.get("alpha", 0.5), col, "alpha", 0.5)
        for name in ("pd", "alpha"):
            value = params.get(name)
            if isinstance(value, Mapping):
                odd = [k for k in value if k not in columns]
                if odd:
                    raise InputError(f"pram: parameter {name!r} names {odd[0]!r}, which is not one of the columns "
                                     f"randomized ({', '.join(columns)})")
        for col in matrices:
            if col not in columns:
                raise InputError(f"pram: parameter 'matrix' names {col!r}, which is not one of the columns "
                                 f"randomized ({', '.join(columns)})")
        for s in strata:
            if s not in table.columns or s in (ROW, CLASS):
                raise InputError(f"pram: stratum column {s!r} (parameter 'strata') is not in the table")
            if s in columns:
                raise InputError(f"pram: column {s!r} is both randomized and a stratum")
        seen: dict[str, str] = {}
        for col, others in links.items():
            if col not in columns:
                raise InputError(f"pram: parameter 'linked' names {col!r}, which is not one of the columns "
                                 f"randomized ({', '.join(columns)})")
            for other in others:
                if other not in table.columns or other in (ROW, CLASS):
                    raise InputError(f"pram: linked column {other!r} (of {col!r}) is not in the table")
                if other in columns or other in strata:
                    raise InputError(f"pram: linked column {other!r} is also randomized or a stratum; a linked "
                                     "column follows one randomized column only")
                if other in seen:
                    raise InputError(f"pram: column {other!r} is linked to both {seen[other]!r} and {col!r}")
                seen[other] = col
        return columns, strata, links, matrices

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        columns, strata, links, given = self._resolve(params, table)
        if not params.get("columns"):
            ctx.note(f"pram: no 'columns' given: randomized the nominal quasi-identifiers {', '.join(columns)}")
        stratum, stratum_labels = _strata(table, strata)
        S = len(stratum_labels)
        n = table.num_rows
        new_columns: dict[str, pa.Array] = {}
        fitted: dict[str, Any] = {}
        for col in columns:
            original = table.column(col)
            original = original.combine_chunks() if isinstance(original, pa.ChunkedArray) else original
            dictionary, codes = _categories(table, original)
            L = len(dictionary)
            if S * L * L > MAX_MATRIX_CELLS:
                raise InputError(f"pram: column {col!r} has {L} categories" + (f" in {S} strata" if strata else "")
                                 + f": its transition matrices would hold {S * L * L:,} cells (at most "
                                 f"{MAX_MATRIX_CELLS:,}); PRAM is for categorical columns of few categories: recode "
                                 "it first (global-recode) or use fewer strata")
            keys = value_keys(dictionary).to_pylist()
            if col in given:
                M = self._given(given[col], keys, col)
                matrices = np.broadcast_to(M, (S, L, L))
            else:
                matrices = self._built(params, col, codes, stratum, S, L, ctx)
            rows = stratum * L + codes
            u = ctx.rng.random(n)
            new = draw_codes(codes, rows, matrices.reshape(S * L, L), u) if L else codes
            changed = (new != codes) & (codes >= 0)
            n_changed = int(changed.sum())
            valid = int((codes >= 0).sum())
            ctx.note(f"pram {col!r}: {n_changed} of {valid} values changed "
                     f"({(n_changed / valid if valid else 0.0):.2%}); {L} categories"
                     + (f", {S} strata" if strata else ""))
            if params.get("record_matrices", True) and L and L <= FITTED_CATEGORIES and S * L * L <= FITTED_CELLS:
                fitted[col] = {"categories": keys,
                               **({"strata": [[None if v is None else str(v) for v in s] for s in stratum_labels]}
                                  if strata else {}),
                               "matrices": [m.tolist() for m in matrices]}
            taken = np.where(codes >= 0, new, 0)
            new_columns[col] = (pc.if_else(pa.array(codes >= 0), dictionary.take(pa.array(taken)).cast(original.type),
                                           original) if L else original)
            if links.get(col):
                donors = self._donors(codes, new, changed, stratum, L, ctx)
                for other in links[col]:
                    values = table.column(other)
                    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
                    new_columns[other] = values.take(pa.array(donors))
                ctx.note(f"pram {col!r}: linked column(s) {', '.join(links[col])} taken from an original record "
                         f"of the new category in {n_changed} record(s)")
        if fitted:
            ctx.record_fitted("pram", fitted)
        return self._publish(table, new_columns, ctx)

    @staticmethod
    def _given(rows: Mapping[str, Mapping[str, float]], keys: list[str], col: str) -> np.ndarray:
        """An explicit matrix over the column's categories, every category given a row."""
        index = {k: i for i, k in enumerate(keys)}
        M = np.zeros((len(keys), len(keys)))
        for source, row in rows.items():
            if source not in index:
                raise InputError(f"pram: matrix for column {col!r} has a row for {source!r}, which is not a "
                                 f"category of the column")
            for target, prob in row.items():
                if target not in index:
                    raise InputError(f"pram: matrix row {source!r} of column {col!r} names {target!r}, which is "
                                     "not a category of the column")
                M[index[source], index[target]] = prob
        missing = [k for k in keys if k not in rows]
        if missing:
            raise InputError(f"pram: matrix for column {col!r} has no row for category {missing[0]!r}")
        return M

    @staticmethod
    def _built(params: Mapping[str, Any], col: str, codes: np.ndarray, stratum: np.ndarray, S: int, L: int,
               ctx: StepContext) -> np.ndarray:
        """sdcMicro's matrices, one per stratum from its own frequencies over the column's
        categories; diagonals drawn in stratum order."""
        pd = _per_column(params.get("pd", 0.8), col, "pd", 0.8)
        alpha = _per_column(params.get("alpha", 0.5), col, "alpha", 0.5)
        valid = codes >= 0
        counts = np.bincount(stratum[valid] * L + codes[valid], minlength=S * L).reshape(S, L).astype(np.float64)
        out = np.empty((S, L, L))
        for s in range(S):  # one matrix per stratum (a loop over strata, not records)
            d = ctx.rng.uniform(pd, 1.0, L) if params.get("diagonal", "uniform") == "uniform" else np.full(L, pd)
            P = base_matrix(d)
            total = counts[s].sum()
            if not params.get("invariant", True):
                out[s] = P
            elif total == 0:
                out[s] = np.eye(L)
            else:
                out[s] = invariant_matrix(counts[s] / total, P, alpha)
        return out

    @staticmethod
    def _donors(codes: np.ndarray, new: np.ndarray, changed: np.ndarray, stratum: np.ndarray, L: int,
                ctx: StepContext) -> np.ndarray:
        """Per record, the record whose linked values it publishes: itself, or for a changed
        record one drawn uniformly among the original records with its new category in its
        stratum (the whole table's when its stratum has none)."""
        n = codes.size
        donors = np.arange(n, dtype=np.int64)
        idx = np.flatnonzero(changed)
        if not idx.size:
            return donors
        u = ctx.rng.random(idx.size)
        valid = np.flatnonzero(codes >= 0)

        def pick(keys_all: np.ndarray, keys_wanted: np.ndarray, size: int, uu: np.ndarray) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
            order = valid[np.argsort(keys_all, kind="stable")]
            counts = np.bincount(keys_all, minlength=size)
            start = np.concatenate(([0], np.cumsum(counts)[:-1]))
            cnt = counts[keys_wanted]
            ok = cnt > 0
            at = start[keys_wanted] + np.minimum((uu * cnt).astype(np.int64), np.maximum(cnt - 1, 0))
            return np.where(ok, order[np.minimum(at, order.size - 1)], -1), ok

        S = int(stratum.max()) + 1 if stratum.size else 1
        local, ok = pick(stratum[valid] * L + codes[valid], stratum[idx] * L + new[idx], S * L, u)
        if not ok.all():
            glob, _ = pick(codes[valid], new[idx], L, u)
            local = np.where(ok, local, glob)
        donors[idx] = local
        return donors

    @staticmethod
    def _publish(table: TypedTable, new_columns: dict[str, pa.Array], ctx: StepContext) -> TypedTable:
        """The input with the changed columns replaced and ``_class`` = each record its own."""
        return publish_columns(table, new_columns, ctx)


PLUGINS = [Pram()]
