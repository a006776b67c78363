"""The multivariate mode of ``singling-out-risk``: anonymeter 1.1's
``multivariate_singling_out_queries``, its random guesser for several columns, and the counting
of conjunctive queries over a table without a Python loop over records or queries.

A query is ``n_cols`` conditions ``(column, operator, value)`` joined by *and*, held as three
``(n_queries, n_cols)`` arrays (columns ascending within a query). The operators and the
semantics of a missing value are those of :mod:`.attacks_singling` (a comparison with a missing
value is false; ``is null`` matches it).

The attacker's queries, from the distinct released rows ``R`` (anonymeter's generator): in
batches of ``min(1000, max_attempts)`` attempts, each attempt a released row drawn at random and
``n_cols`` distinct columns drawn at random; per column, ``is null`` where the row lacks a value,
``==`` its value for a category, and for a number ``>=`` its value when the value is above the
column's median over ``R`` (missing values left out), ``<=`` otherwise. An attempt is kept when
its query matches exactly one row of ``R`` and is not kept already, in attempt order, until
``n_queries`` are kept or ``max_attempts`` attempts are spent (counted per batch, as anonymeter
does).

Counting (:class:`Ranks`): each table once as the ranks of its values per column; a condition
is a range of ranks, tested for a block of queries against every row with one subtraction and
one unsigned comparison per cell, blocks of at most ``BLOCK_CELLS`` cells whatever the number
of queries; "exactly one" first on every 16th row (two matches there rule a query out).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .attacks import attack_risk

__all__ = ["EQ", "GE", "GT", "LE", "LT", "NE", "NOT_NULL", "NULL", "Ranks", "conjunction_counts",
           "conjunction_counts_dense", "conjunction_matches", "fit_size_correction", "multivariate_queries",
           "multivariate_risk", "probability_integral", "random_conjunctions", "subsample_successes"]

# operators of a condition (column, operator, value); the univariate mode's queries use them too
EQ, NE, GT, LT, GE, LE, NULL, NOT_NULL = range(8)
BLOCK_CELLS = 1 << 22  # ranks gathered at once (16 MiB)

Queries = tuple[np.ndarray, np.ndarray, np.ndarray]


def _compare(a: np.ndarray, op: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Elementwise ``a op v`` for operator codes ``op`` (a missing ``a`` or ``v`` fails every
    comparison; ``is null`` and ``is not null`` ignore ``v``): the reference for :class:`Ranks`."""
    hit = np.empty(np.broadcast_shapes(a.shape, v.shape), dtype=bool)
    ok = ~np.isnan(a) & ~np.isnan(v)
    for code in np.unique(op):
        i = np.flatnonzero(op == code)
        x, y, o = a[i], v[i], ok[i]
        hit[i] = (x == y if code == EQ else (x != y) & o if code == NE else x > y if code == GT
                  else x < y if code == LT else x >= y if code == GE else x <= y if code == LE
                  else np.isnan(x) if code == NULL else ~np.isnan(x))
    return hit


def conjunction_counts_dense(X: np.ndarray, cols: np.ndarray, ops: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """How many rows of ``X`` each conjunctive query matches, in floats, every query against
    every row: the reference for :class:`Ranks` (tests, benchmark)."""
    Xt = np.ascontiguousarray(X.T)
    mask = np.ones((cols.shape[0], X.shape[0]), dtype=bool)
    for c in range(cols.shape[1]):
        mask &= _compare(Xt[cols[:, c]], ops[:, c], vals[:, c, None])
    return np.count_nonzero(mask, axis=1)


class Ranks:
    """A table as the ranks of its values per column (int32, ``-1`` for a missing value, one
    contiguous row per column). Every condition is then a range of ranks (``!=`` the rest of
    the present ranks), tested by one subtraction and one unsigned comparison per cell; queries
    go in blocks of ``BLOCK_CELLS`` cells (queries x rows)."""

    def __init__(self, X: np.ndarray):
        n, m = X.shape
        self.n = n
        self.codes = np.empty((m, n), dtype=np.int32)
        self.values: list[np.ndarray] = []
        for j in range(m):
            col = X[:, j]
            present = ~np.isnan(col)
            uniq, inv = np.unique(col[present], return_inverse=True)
            self.codes[j] = -1
            self.codes[j, present] = inv
            self.values.append(uniq)

    def ranges(self, cols: np.ndarray, ops: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per condition ``(lo, width)``: it holds where ``0 <= rank - lo < width`` (``!=``: where
        not, the rank present)."""
        lo = np.zeros(cols.shape, dtype=np.int64)
        hi = np.zeros(cols.shape, dtype=np.int64)
        for j in np.unique(cols):
            at = cols == j
            u = self.values[j]
            v, op = vals[at], ops[at]
            left, right = np.searchsorted(u, v, side="left"), np.searchsorted(u, v, side="right")
            lo[at] = np.select([op == EQ, op == NE, op == GT, op == GE, op == NULL], [left, left, right, left, -1], 0)
            hi[at] = np.select([op == EQ, op == NE, op == LT, op == LE, op == NULL], [right, right, left, right, 0],
                               u.size)
            # a comparison with a missing value holds nowhere (!=: its complement, every present rank)
            missing = (op != NULL) & (op != NOT_NULL) & np.isnan(v)
            lo[at] = np.where(missing & (op == NE), 0, lo[at])
            hi[at] = np.where(missing, np.where(op == NE, u.size, lo[at]), hi[at])
        return lo, hi - lo

    def _masks(self, cols: np.ndarray, ops: np.ndarray, vals: np.ndarray, rows: slice = slice(None)):
        lo, width = self.ranges(cols, ops, vals)
        lo32, w32 = lo.astype(np.int32), width.astype(np.uint32)
        neg = ops == NE
        codes = self.codes[:, rows]
        n = codes.shape[1]
        step = max(1, BLOCK_CELLS // max(n, 1))
        for start in range(0, cols.shape[0], step):
            b = slice(start, min(cols.shape[0], start + step))
            mask = np.ones((b.stop - start, n), dtype=bool)
            for c in range(cols.shape[1]):
                V = codes[cols[b, c]]
                hit = (V - lo32[b, c, None]).view(np.uint32) < w32[b, c, None]
                i = np.flatnonzero(neg[b, c])
                if i.size:
                    hit[i] = ~hit[i] & (V[i] >= 0)
                mask &= hit
            yield start, mask

    def counts(self, cols: np.ndarray, ops: np.ndarray, vals: np.ndarray, rows: slice = slice(None)) -> np.ndarray:
        """How many rows (of those in ``rows``) each conjunctive query matches."""
        out = np.zeros(cols.shape[0], dtype=np.int64)
        for start, mask in self._masks(cols, ops, vals, rows):
            out[start:start + mask.shape[0]] = np.count_nonzero(mask, axis=1)
        return out

    def single(self, cols: np.ndarray, ops: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Whether each query matches exactly one row: first counted on every 16th row (two
        matches there rule it out), the rest on every row."""
        out = np.zeros(cols.shape[0], dtype=bool)
        if cols.shape[0] == 0:
            return out
        left = np.flatnonzero(self.counts(cols, ops, vals, slice(None, None, 16)) < 2)
        out[left] = self.counts(cols[left], ops[left], vals[left]) == 1
        return out

    def pairs(self, cols: np.ndarray, ops: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every (query, row) pair that matches, as two int64 arrays."""
        qs, rs = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for start, mask in self._masks(cols, ops, vals):
            q, r = np.nonzero(mask)
            qs.append(q + start)
            rs.append(r)
        return np.concatenate(qs).astype(np.int64), np.concatenate(rs).astype(np.int64)


def conjunction_counts(X: np.ndarray, cols: np.ndarray, ops: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """How many rows of ``X`` each conjunctive query matches."""
    return Ranks(X).counts(cols, ops, vals)


def conjunction_matches(X: np.ndarray, cols: np.ndarray, ops: np.ndarray, vals: np.ndarray) -> list[np.ndarray]:
    """The rows of ``X`` each query matches, ascending (for tests and small tables)."""
    q, r = Ranks(X).pairs(cols, ops, vals)
    return [np.sort(r[q == i]) for i in range(cols.shape[0])]


def subsample_successes(pairs: tuple[np.ndarray, np.ndarray], n_queries: int, n_rows: int) -> Callable:
    """A function of a subsample's row indices: how many queries match exactly one of its rows."""
    q, r = pairs

    def successes(rows: np.ndarray) -> int:
        inside = np.zeros(n_rows, dtype=bool)
        inside[rows] = True
        return int((np.bincount(q[inside[r]], minlength=n_queries) == 1).sum())
    return successes


def _random_columns(rng: np.random.Generator, n: int, m: int, k: int) -> np.ndarray:
    """``n`` sets of ``k`` distinct columns out of ``m``, each uniform, ascending within a set."""
    return np.sort(np.argsort(rng.random((n, m)), axis=1)[:, :k], axis=1)


def multivariate_queries(R: np.ndarray, numeric: np.ndarray, rng: np.random.Generator, n_queries: int,
                         n_cols: int, max_attempts: int | None) -> tuple[Queries, int]:
    """anonymeter's multivariate singling-out queries on the distinct released rows ``R`` (module
    docstring); returns the queries and the number of attempts spent."""
    n, m = R.shape
    k = n_cols
    present = ~np.isnan(R)
    medians = np.full(m, np.nan)
    for j in np.flatnonzero(numeric & present.any(axis=0)):
        medians[j] = np.median(R[present[:, j], j])
    batch = 1000 if max_attempts is None else min(1000, max_attempts)
    index = Ranks(R)
    kept_cols, kept_ops, kept_vals = [], [], []
    seen: set[bytes] = set()
    n_kept, attempts = 0, 0
    while n_kept < n_queries and n > 0:
        if max_attempts is not None and attempts >= max_attempts:
            break
        rows = rng.integers(0, n, size=batch)
        cols = _random_columns(rng, batch, m, k)
        vals = R[rows[:, None], cols]
        ops = np.where(numeric[cols], np.where(vals > medians[cols], GE, LE), EQ)
        ops[np.isnan(vals)] = NULL
        single = np.flatnonzero(index.single(cols, ops, vals))
        # a kept query matches the row it came from alone: the row and the columns name it
        keys = np.concatenate([rows[single, None], cols[single]], axis=1)
        for i, key in zip(single.tolist(), keys):
            b = key.tobytes()
            if b in seen:
                continue
            seen.add(b)
            kept_cols.append(cols[i]), kept_ops.append(ops[i]), kept_vals.append(vals[i])
            n_kept += 1
            if n_kept == n_queries:
                break
        attempts += batch
    if not kept_cols:
        return (np.zeros((0, k), np.int64), np.zeros((0, k), np.int64), np.zeros((0, k))), attempts
    return (np.array(kept_cols, np.int64), np.array(kept_ops, np.int64), np.array(kept_vals, np.float64)), attempts


def random_conjunctions(R: np.ndarray, numeric: np.ndarray, rng: np.random.Generator, n_queries: int,
                        n_cols: int) -> Queries:
    """anonymeter's random guesser with ``n_cols`` columns: per query ``n_cols`` distinct random
    columns, per column one of its released values (a missing one among them) and a random
    operator (``==``/``!=`` for a category, any comparison for a number; with a missing value
    ``==`` becomes ``is null`` and the others ``is not null``)."""
    m = R.shape[1]
    cols = _random_columns(rng, n_queries, m, n_cols)
    vals = np.empty(cols.shape)
    ops = np.empty(cols.shape, dtype=np.int64)
    for j in range(m):
        at = cols == j
        if not at.any():
            continue
        col = R[:, j]
        values = np.unique(col[~np.isnan(col)])
        if np.isnan(col).any():
            values = np.append(values, np.nan)
        s = int(at.sum())
        vals[at] = values[rng.integers(0, values.size, size=s)]
        ops[at] = rng.integers(0, 6 if numeric[j] else 2, size=s)  # EQ, NE (, GT, LT, GE, LE)
    missing = np.isnan(vals)
    ops[missing] = np.where(ops[missing] == EQ, NULL, NOT_NULL)
    return cols, ops, vals


MAX_PAIRS = 50_000_000  # (query, control row) matches kept for the size correction's subsamples


def probability_integral(n: np.ndarray, w: float) -> np.ndarray:
    """``(1 - (n w + 1)(1 - w)^n) / (n + 1)``: anonymeter's singling-out probability
    integrated over query weights from 0 to ``w``."""
    n = np.asarray(n, dtype=np.float64)
    return (1.0 - (n * w + 1.0) * (1.0 - w) ** n) / (n + 1.0)


def corrected_control(name: str, s_c: float, n_att: int, n_control: int, n_original: int, ctx: Any,
                      fit: Callable[[], float]) -> tuple[float, float, float]:
    """``(count, correction, fitted)``: the control count times the size correction ``fit()``
    gives, capped at ``n_att`` (a rate above 1 has no Wilson interval). When least squares finds
    no fit (scipy's RuntimeError, where anonymeter stops), the count stays as counted, a note
    says so and ``fitted`` is 0: a query of a rare value singles out less often in fewer
    records, so the risk is then more likely over- than underestimated."""
    correction, fitted = 1.0, 1.0
    try:
        correction = fit()
    except (RuntimeError, ValueError) as exc:
        fitted = 0.0
        ctx.note(f"{name}: the control count is not corrected for the control set's size "
                 f"({n_control} against {n_original} distinct records): the size model could not be fitted "
                 f"({exc}); a query of a rare value singles out less often in fewer records, so the risk "
                 "is more likely over- than underestimated")
    return min(s_c * correction, float(n_att)), correction, fitted


def fit_size_correction(n: int, n_original: int, rng: np.random.Generator,
                        successes: Callable[[np.ndarray], int]) -> float:
    """``f(n_original) / f(n)`` with ``f(x) = norm * probability_integral(x, w)`` fitted by least
    squares to ``successes`` (the queries singling out) on random subsamples of ``n`` control rows:
    10 sizes from ``min(1000, n)`` to ``n``, 5 subsamples each (anonymeter's correction)."""
    from scipy.optimize import curve_fit  # deferred: scipy only when the control set's size differs

    sizes, counts = [], []
    for size in np.linspace(min(1000, n), n, 10).astype(int):
        for _ in range(5):
            counts.append(successes(rng.choice(n, size=size, replace=False)))
            sizes.append(size)
    x, y = np.array(sizes, dtype=np.float64), np.array(counts, dtype=np.float64)

    def model(x, w, norm):
        return norm * probability_integral(x, w)

    w0 = 1.0 / x.max()
    p, _ = curve_fit(model, xdata=x, ydata=y, bounds=(0, (1, np.inf)), p0=(w0, 1.0 / probability_integral(x.max(),
                                                                                                          w0)))
    return float(model(n_original, *p) / model(n, *p))


def multivariate_risk(name: str, R: np.ndarray, O: np.ndarray, C: np.ndarray, numeric: np.ndarray, n_att: int,
                      n_cols: int, max_attempts: int | None, confidence: float, ctx) -> dict[str, float]:
    """The multivariate attack on the distinct released, original and control rows: the
    attacker's queries, their successes on the original and the control rows (the control count
    corrected for the control set's size as in the univariate mode), the random guesser's on the
    original rows, and the risk with its interval (:func:`.attacks.attack_risk`)."""
    queries, attempts = multivariate_queries(R, numeric, ctx.rng, n_att, n_cols, max_attempts)
    n_q = queries[0].shape[0]
    ranks_o, ranks_c = Ranks(O), Ranks(C)
    s_t = int(ranks_o.single(*queries).sum())
    c_counts = ranks_c.counts(*queries)
    s_c: float = int((c_counts == 1).sum())
    correction, fitted = 1.0, 1.0
    if C.shape[0] != O.shape[0] and n_q and C.shape[0] > 1:
        if int(c_counts.sum()) <= MAX_PAIRS:
            successes = subsample_successes(ranks_c.pairs(*queries), n_q, C.shape[0])
        else:  # too many matches to keep: count each subsample afresh
            def successes(rows: np.ndarray) -> int:
                return int(Ranks(C[rows]).single(*queries).sum())
        s_c, correction, fitted = corrected_control(
            name, s_c, n_att, C.shape[0], O.shape[0], ctx,
            lambda: fit_size_correction(C.shape[0], O.shape[0], ctx.rng, successes))
    s_b = int(ranks_o.single(*random_conjunctions(R, numeric, ctx.rng, n_att, n_cols)).sum()) if R.shape[0] else 0
    ctx.note(f"{name}: {n_q} multivariate queries on {n_cols} columns single out one released record "
             f"({attempts} attempts); {s_t} single out one original and {s_c:.6g} one control record"
             + (f" (count x {correction:.6g} for {C.shape[0]} against {O.shape[0]} distinct records)"
                if correction != 1.0 else ""))
    out = attack_risk(name, n_att, s_t, n_att, s_c, n_att, s_b, confidence)
    out[f"{name}.queries"] = float(n_q)
    out[f"{name}.control_correction"] = correction
    out[f"{name}.control_correction_fitted"] = fitted
    out[f"{name}.attempts"] = float(attempts)
    return out
