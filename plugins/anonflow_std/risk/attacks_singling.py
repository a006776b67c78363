"""``singling-out-risk``: anonymeter's singling-out attack in its univariate mode, measured
against a held-out control set like the attacks of :mod:`.attacks`.

A query *singles out* in a table when exactly one record of it matches. The attacker reads the
release and writes univariate queries that single out there (anonymeter 1.1's
``univariate_singling_out_queries``), for each column:

* ``col is null`` when exactly one released record lacks a value;
* ``col <= min`` and ``col >= max`` for a numeric column (its least and greatest values);
* ``col == v`` for every value ``v`` that one released record alone holds;

in an order drawn at random, keeping the first ``n_attacks`` that single out in the release
(every table is first reduced to its distinct records over ``columns``, as anonymeter does).
Each query that singles out in the original (distinct) records counts a success, and the same
queries are counted on the control set. A comparison with a missing value is false (polars'
semantics, anonymeter 1.1's).

When the control set holds another number of distinct records than the original, a query
singles out in it with another probability; anonymeter corrects the control count by
``f(n_original) / f(n_control)``, ``f(n) = norm * (1 - (n w + 1)(1 - w)^n) / (n + 1)`` (the
chance that a query of weight up to ``w`` singles out in ``n`` records, Cohen and Nissim 2020)
fitted by least squares to the counts on random subsamples of the control set: 10 sizes from
``min(1000, n)`` to ``n``, 5 subsamples each. We do the same with ``ctx.rng``.

The risk divides by ``n_attacks``, as anonymeter does, even when the release offers fewer
singling-out queries (the number found is ``.queries``): the risk is then an underestimate.
The random guesser: ``n_attacks`` queries of a random column, a random released value (or
null) and a random operator (``==``/``!=`` for a category, any comparison for a number).

``mode: multivariate`` (anonymeter's default mode: queries on ``n_cols`` columns built from
released records) is in :mod:`.singling_multi`; this module dispatches to it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable

from .. import __version__
from .attacks import CONFIDENCE, CONTROL, attack_risk, control_table, encode
from .singling_multi import (EQ, GE, GT, LE, LT, NE, NOT_NULL, NULL, corrected_control, fit_size_correction,
                             multivariate_risk, probability_integral)

__all__ = ["EQ", "GE", "GT", "LE", "LT", "NE", "NOT_NULL", "NULL", "SinglingOutRisk", "distinct_records",
           "probability_integral", "query_counts", "size_correction", "univariate_queries"]

RESERVED = ("_row", "_class")


def distinct_records(X: np.ndarray) -> np.ndarray:
    """The distinct rows of ``X`` (NaN equal to NaN), in order of first appearance."""
    if X.shape[0] == 0:
        return X
    missing = np.isnan(X)
    key = np.hstack([np.where(missing, 0.0, X), missing])
    _, first = np.unique(key, axis=0, return_index=True)
    return X[np.sort(first)]


def query_counts(X: np.ndarray, cols: np.ndarray, ops: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """How many rows of ``X`` each query ``(cols[i], ops[i], vals[i])`` matches (a missing value
    matches only ``is null``), by binary search in each column's sorted values."""
    out = np.zeros(cols.size, dtype=np.int64)
    for j in np.unique(cols):
        q = np.flatnonzero(cols == j)
        col = X[:, j]
        present = np.sort(col[~np.isnan(col)])
        m, nulls = present.size, col.size - present.size
        v = vals[q]
        left = np.searchsorted(present, v, side="left")
        right = np.searchsorted(present, v, side="right")
        op = ops[q]
        eq = right - left
        out[q] = np.select([op == EQ, op == NE, op == GT, op == LT, op == GE, op == LE, op == NULL, op == NOT_NULL],
                           [eq, m - eq, m - right, left, m - left, right, nulls, m])
    return out


def univariate_queries(R: np.ndarray, numeric: np.ndarray, rng: np.random.Generator,
                       n_queries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """anonymeter's univariate singling-out queries on the (distinct) released rows ``R``:
    every candidate, shuffled, the first ``n_queries`` that single out in ``R``."""
    cols, ops, vals = [], [], []
    for j in range(R.shape[1]):
        col = R[:, j]
        present = col[~np.isnan(col)]
        if col.size - present.size == 1:
            cols.append(j), ops.append(NULL), vals.append(np.nan)
        if numeric[j] and present.size:
            cols += [j, j]
            ops += [LE, GE]
            vals += [present.min(), present.max()]
        values, counts = np.unique(present, return_counts=True)
        rare = values[counts == 1]
        cols += [j] * rare.size
        ops += [EQ] * rare.size
        vals += rare.tolist()
    cols_a, ops_a, vals_a = np.array(cols, np.int64), np.array(ops, np.int64), np.array(vals, np.float64)
    order = rng.permutation(cols_a.size)
    cols_a, ops_a, vals_a = cols_a[order], ops_a[order], vals_a[order]
    keep = np.flatnonzero(query_counts(R, cols_a, ops_a, vals_a) == 1)[:n_queries]
    return cols_a[keep], ops_a[keep], vals_a[keep]


def random_queries(R: np.ndarray, numeric: np.ndarray, rng: np.random.Generator,
                   n_queries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The random guesser's queries: a random column, one of its released values (a missing
    one among them) and a random operator each."""
    cols = rng.integers(0, R.shape[1], size=n_queries)
    vals = np.empty(n_queries)
    ops = np.empty(n_queries, dtype=np.int64)
    for j in np.unique(cols):
        q = np.flatnonzero(cols == j)
        col = R[:, j]
        values = np.unique(col[~np.isnan(col)])
        if np.isnan(col).any():
            values = np.append(values, np.nan)
        vals[q] = values[rng.integers(0, values.size, size=q.size)]
        ops[q] = rng.integers(0, 6 if numeric[j] else 2, size=q.size)  # EQ, NE (, GT, LT, GE, LE)
    missing = np.isnan(vals)
    ops[missing] = np.where(ops[missing] == EQ, NULL, NOT_NULL)
    return cols, ops, vals


def size_correction(C: np.ndarray, queries: tuple[np.ndarray, np.ndarray, np.ndarray], n_original: int,
                    rng: np.random.Generator,
                    successes: Callable[[np.ndarray], int] | None = None) -> float:
    """``f(n_original) / f(n_control)`` with ``f`` fitted to the singling-out counts of the
    queries on random subsamples of the control rows ``C`` (module docstring). ``successes``
    counts them for a subsample's row indices (default: the univariate queries' count)."""
    if successes is None:
        def successes(rows: np.ndarray) -> int:
            return int((query_counts(C[rows], *queries) == 1).sum())
    return fit_size_correction(C.shape[0], n_original, rng, successes)


class SinglingOutRisk(Metric):
    name = "singling-out-risk"
    version = __version__
    description = ("anonymeter's singling-out attack: queries (on one column, or on n_cols columns built from "
                   "released records) that match one released record, their success on the original beyond that on "
                   "a control set.")
    category = "risk"
    params = (
        Param("columns", "list", items="str", default=None, nullable=True,
              help="the columns queried (default: every column the three tables share)"),
        CONTROL,
        Param("n_attacks", "int", default=500, min=1, max=1_000_000,
              help="singling-out queries the attacker writes (anonymeter's default 500); the risk divides by it"),
        CONFIDENCE,
        Param("mode", "str", default="univariate", choices=("univariate", "multivariate"),
              help="univariate: queries on one column (rare values, extremes); multivariate: queries on n_cols "
                   "columns built from released records (anonymeter's default mode)"),
        Param("n_cols", "int", default=3, min=1, max=1000,
              help="multivariate: the columns each query conditions on (anonymeter's default 3; at most the "
                   "number of columns queried)"),
        Param("max_attempts", "int", default=10_000_000, min=1, nullable=True,
              help="multivariate: the attempts (released record and columns drawn) the attacker may spend to find "
                   "n_attacks singling-out queries, counted per batch of 1000 (anonymeter's default 10 million; "
                   "null: no limit)"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        if original is None:
            original = anonymized
        control = control_table(params, ctx, self.name)
        cols = params.get("columns")
        if cols is None:
            cols = [c for c in anonymized.columns if c not in RESERVED and c in original.columns
                    and c in control.columns]
        if not cols:
            raise InputError(f"{self.name} needs columns: the released, original and control tables share none")
        (R, O, C), n_num = encode((anonymized, original, control), cols, self.name,
                                  ("released", "original", "control"))
        # encode orders the columns numeric first; which are numeric is all the queries need to know
        numeric = np.arange(len(cols)) < n_num
        for X in (R, O, C):  # a missing category: encode's code -1, here missing like a missing number
            cat = X[:, n_num:]
            cat[cat == -1] = np.nan
        R, O, C = distinct_records(R), distinct_records(O), distinct_records(C)
        n_att = int(params.get("n_attacks") or 500)
        if (params.get("mode") or "univariate") == "multivariate":
            n_cols = int(params.get("n_cols") or 3)
            if n_cols > len(cols):
                raise InputError(f"{self.name}: n_cols {n_cols} exceeds the {len(cols)} columns queried")
            return multivariate_risk(self.name, R, O, C, numeric, n_att, n_cols,
                                     params.get("max_attempts", 10_000_000), float(params.get("confidence") or 0.95),
                                     ctx)
        queries = univariate_queries(R, numeric, ctx.rng, n_att)
        s_t = int((query_counts(O, *queries) == 1).sum())
        s_c: float = int((query_counts(C, *queries) == 1).sum())
        correction, fitted = 1.0, 1.0
        if C.shape[0] != O.shape[0] and queries[0].size and C.shape[0] > 1:
            s_c, correction, fitted = corrected_control(self.name, s_c, n_att, C.shape[0], O.shape[0], ctx,
                                                        lambda: size_correction(C, queries, O.shape[0], ctx.rng))
        s_b = int((query_counts(O, *random_queries(R, numeric, ctx.rng, n_att)) == 1).sum())
        ctx.note(f"{self.name}: {queries[0].size} univariate queries single out one released record; "
                 f"{s_t} single out one original and {s_c:.6g} one control record"
                 + (f" (count x {correction:.6g} for {C.shape[0]} against {O.shape[0]} distinct records)"
                    if correction != 1.0 else ""))
        out = attack_risk(self.name, n_att, s_t, n_att, s_c, n_att, s_b, float(params.get("confidence") or 0.95))
        out[f"{self.name}.queries"] = float(queries[0].size)
        out[f"{self.name}.control_correction"] = correction
        out[f"{self.name}.control_correction_fitted"] = fitted
        return out


PLUGINS = [SinglingOutRisk()]
