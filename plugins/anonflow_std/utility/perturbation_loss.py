"""Utility of a perturbed (or microaggregated) numeric release, record by record and in its
moments, after sdcMicro (R/dUtility.R, ``summary.micro`` in R/microaggregation.R, and
``IL_correl``): ``il1s``, ``eigen-utility``, ``correlation-change`` and ``moments-change``
(docs/perturbation-utility.md).

Each takes ``[original, released]`` holding the same records (``_row``), compares the named
numeric columns (default: the continuous quasi-identifiers, as ``sse-il`` and ``dld`` do) and
accepts any released table whose columns are numbers: a perturbation's, a microaggregation's.
Standard deviations, variances and covariances are R's (divisor n - 1), as in sdcMicro.
A missing value (a suppressed cell, NaN here) is left out: ``il1s`` skips the pair (sdcMicro's
``na.rm = TRUE``), the moments use each table's own known values and the covariance matrices
each table's complete records (R's ``use = "complete.obs"``)."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable

from .. import __version__
from ..common.columns import numeric_columns, numeric_values

__all__ = ["Il1s", "EigenUtility", "CorrelationChange", "MomentsChange", "il1s_terms", "covariance",
           "correlation", "check_regular", "eigen_change", "il_correl", "relative_matrix_change", "paired_values"]

COLUMNS = Param("columns", "list", items="str", default=None, nullable=True,
                help="numeric columns to compare (default: the continuous quasi-identifiers)")
HINT = " (type them continuous, or name them with columns:)"
#: rows per block when a covariance matrix is accumulated (a block of n x d doubles at a time)
BLOCK = 1 << 20


def paired_values(original: TypedTable, released: TypedTable, params: Mapping[str, Any],
                  metric: str) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """The compared columns and both tables' values, one contiguous float64 array per column
    (a missing value is NaN; one column at a time, never a strided ``n x d`` copy); the tables
    must hold the same records in the same order."""
    cols = numeric_columns(original, released, params, metric, hint=HINT)
    return (cols, [numeric_values(original, [c], metric).reshape(-1) for c in cols],
            [numeric_values(released, [c], metric).reshape(-1) for c in cols])


def _known(x: np.ndarray) -> np.ndarray:
    """``x`` without its NaNs (``x`` itself when its sum is not NaN: no mask needed)."""
    if not math.isnan(float(x.sum())):
        return x
    return x[~np.isnan(x)]


def sample_sd(x: np.ndarray) -> float:
    """R's ``sd(x, na.rm = TRUE)``: the standard deviation with divisor n - 1 of the known values
    (NaN when fewer than two)."""
    x = _known(x)
    return float(np.std(x, ddof=1)) if x.size >= 2 else math.nan


def il1s_terms(Xo: list[np.ndarray], Xr: list[np.ndarray], names: list[str],
               metric: str = "il1s") -> tuple[np.ndarray, int]:
    """Per column j, ``sum_i |x_ij - x'_ij| / (sqrt(2) S_j)`` over the records where both values
    are known, with ``S_j`` the original's standard deviation (divisor n - 1, as R's ``sd``);
    and how many cells were skipped for a missing value."""
    sums = np.empty(len(names))
    skipped = 0
    for j, (xo, xr) in enumerate(zip(Xo, Xr)):
        s = sample_sd(xo)
        if not s > 0:
            raise InputError(f"{metric}: column {names[j]!r} is constant in the original (standard deviation "
                             f"{s:g}); IL1s scales each column by it: leave {names[j]!r} out of columns:")
        diff = np.abs(xo - xr)
        known = _known(diff)
        skipped += diff.size - known.size
        sums[j] = known.sum() / (math.sqrt(2.0) * s)
    return sums, skipped


def covariance(columns: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """The sample covariance matrix (divisor n - 1) of the complete rows of the columns and
    their number, accumulated block by block (``BLOCK`` rows of the ``n x d`` matrix at a time)."""
    d = len(columns)
    if any(math.isnan(float(x.sum())) for x in columns):
        missing = np.logical_or.reduce([np.isnan(x) for x in columns])
        columns = [x[~missing] for x in columns]
    n = columns[0].size if columns else 0
    if n < 2:
        return np.full((d, d), np.nan), n
    mean = np.array([x.mean() for x in columns])
    gram = np.zeros((d, d))
    block = np.empty((min(n, BLOCK), d))
    for start in range(0, n, BLOCK):
        rows = min(BLOCK, n - start)
        for j, x in enumerate(columns):  # centred into the block's columns, no temporary
            np.subtract(x[start:start + rows], mean[j], out=block[:rows, j])
        gram += block[:rows].T @ block[:rows]
    return gram / (n - 1), n


def correlation(cov: np.ndarray, names: list[str], which: str, metric: str) -> np.ndarray:
    """The correlation matrix of a covariance matrix; a constant column has none."""
    sd = np.sqrt(np.diag(cov))
    for j, s in enumerate(sd):
        if not s > 0:
            raise InputError(f"{metric}: column {names[j]!r} is constant in the {which} table (or has fewer than two "
                             "complete records); its correlations are undefined: leave it out of columns:")
    r = cov / np.outer(sd, sd)
    np.fill_diagonal(r, 1.0)
    return np.clip(r, -1.0, 1.0)


def check_regular(r: np.ndarray, names: list[str], which: str, metric: str) -> None:
    """Refuse a singular correlation matrix (as R's ``solve`` does: its condition number times
    the machine epsilon at least 1), naming the columns that are linearly dependent (those the
    eigenvector of the smallest eigenvalue loads on)."""
    w, v = np.linalg.eigh(r)
    if w[0] > 0 and w[-1] / w[0] * np.finfo(float).eps < 1.0:
        return
    load = np.abs(v[:, 0])
    dependent = [names[j] for j in np.flatnonzero(load >= 0.1 * load.max())]
    raise InputError(f"{metric}: the {which} table's correlation matrix is singular: columns "
                     f"{', '.join(dependent)} are linearly dependent (one is a combination of the others); "
                     "leave one of them out of columns:")


def eigen_change(r_original: np.ndarray, r_released: np.ndarray, names: list[str],
                 metric: str = "eigen-utility") -> np.ndarray:
    """sdcMicro's dUtility "eigen" terms: ``|e_k - e'_k| / e_k`` for the eigenvalues of the two
    correlation matrices (R's ``var(scale(x))``), both in decreasing order."""
    check_regular(r_original, names, "original", metric)
    e1 = np.linalg.eigvalsh(r_original)[::-1]
    e2 = np.linalg.eigvalsh(r_released)[::-1]
    return np.abs(e1 - e2) / e1


def il_correl(r_original: np.ndarray, r_released: np.ndarray, names: list[str],
              metric: str = "correlation-change") -> float:
    """sdcMicro's ``IL_correl`` (Mlodak 2020, with sdcMicro's constant 1/sqrt(2)): the distance
    between the diagonals of the two inverse correlation matrices, each scaled to unit length,
    times 1/sqrt(2); in [0, 1]."""
    diags = []
    for which, r in (("original", r_original), ("released", r_released)):
        check_regular(r, names, which, metric)
        diag = np.diag(np.linalg.inv(r))
        diags.append(diag / math.sqrt(float(np.sum(diag * diag))))
    delta = diags[0] - diags[1]
    return float(math.sqrt(float(np.sum(delta * delta))) / math.sqrt(2.0))


def relative_matrix_change(a: np.ndarray, b: np.ndarray) -> float:
    """``sum_ij |a_ij - b_ij| / |a_ij| / (2 d)`` over the entries where ``a_ij`` is not 0:
    ``summary.micro``'s ``acov`` (covariance matrices) and ``acor`` (correlation matrices)."""
    nonzero = a != 0
    return float(np.sum(np.abs(a - b)[nonzero] / np.abs(a[nonzero])) / (2 * a.shape[0]))


class Il1s(Metric):
    name = "il1s"
    version = __version__
    description = ("IL1s: mean over records and columns of |x - x'| / (sqrt(2) S), S the original's standard "
                   "deviation (n - 1); sdcMicro's dUtility IL1s divided by n * p (Mateo-Sanz et al. 2004).")
    category = "utility"
    params = (COLUMNS,)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        cols, Xo, Xr = paired_values(original, anonymized, params, self.name)
        n = original.num_rows
        if n < 2:
            raise InputError(f"{self.name} needs at least two records (a standard deviation), got {n}")
        sums, skipped = il1s_terms(Xo, Xr, cols, self.name)
        out = {self.name: float(sums.sum()) / (n * len(cols)), f"{self.name}.sum": float(sums.sum()),
               f"{self.name}.missing": float(skipped)}
        out.update({f"{self.name}.column.{c}": float(s) / n for c, s in zip(cols, sums)})
        return out


class EigenUtility(Metric):
    name = "eigen-utility"
    version = __version__
    description = ("sdcMicro's dUtility 'eigen': sum over k of |e_k - e'_k| / e_k, the eigenvalues of the original's "
                   "and the released correlation matrices in decreasing order (0: the same).")
    category = "utility"
    params = (COLUMNS,)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        cols, Xo, Xr = paired_values(original, anonymized, params, self.name)
        r1 = correlation(covariance(Xo)[0], cols, "original", self.name)
        r2 = correlation(covariance(Xr)[0], cols, "released", self.name)
        terms = eigen_change(r1, r2, cols, self.name)
        return {self.name: float(terms.sum()), f"{self.name}.max": float(terms.max()),
                f"{self.name}.columns": float(len(cols))}


class CorrelationChange(Metric):
    name = "correlation-change"
    version = __version__
    description = ("Change of the correlation structure: sdcMicro's IL_correl (Mlodak; in [0, 1]) as the headline, "
                   "the mean and largest absolute change of a correlation, and summary.micro's acor and acov.")
    category = "utility"
    params = (COLUMNS,)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        cols, Xo, Xr = paired_values(original, anonymized, params, self.name)
        c1, _ = covariance(Xo)
        c2, _ = covariance(Xr)
        r1 = correlation(c1, cols, "original", self.name)
        r2 = correlation(c2, cols, "released", self.name)
        upper = np.triu_indices(len(cols), k=1)
        pairs = np.abs(r1 - r2)[upper]
        return {self.name: il_correl(r1, r2, cols, self.name),
                f"{self.name}.mean_abs": float(pairs.mean()) if pairs.size else 0.0,
                f"{self.name}.max_abs": float(pairs.max()) if pairs.size else 0.0,
                f"{self.name}.acor": relative_matrix_change(r1, r2),
                f"{self.name}.acov": relative_matrix_change(c1, c2)}


class MomentsChange(Metric):
    name = "moments-change"
    version = __version__
    description = ("Relative change of each column's mean |m' - m| / |m| and variance |v' - v| / v (n - 1); headline: "
                   "the largest of them. A mean of 0 is measured against the standard deviation instead.")
    category = "utility"
    params = (COLUMNS,)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        cols, Xo, Xr = paired_values(original, anonymized, params, self.name)
        out: dict[str, float] = {}
        means, variances = [], []
        for j, c in enumerate(cols):
            xo, xr = _known(Xo[j]), _known(Xr[j])
            if xo.size < 2 or xr.size < 2:
                raise InputError(f"{self.name}: column {c!r} has fewer than two known values in one of the tables")
            m, mr = float(xo.mean()), float(xr.mean())
            v, vr = float(xo.var(ddof=1)), float(xr.var(ddof=1))
            if not v > 0:
                raise InputError(f"{self.name}: column {c!r} is constant in the original (variance 0); its relative "
                                 f"change of variance is undefined: leave {c!r} out of columns:")
            if m != 0:
                dm = abs(mr - m) / abs(m)
            else:
                dm = abs(mr - m) / math.sqrt(v)
                ctx.note(f"{self.name}: the original mean of {c!r} is 0; its change is given in standard deviations")
            dv = abs(vr - v) / v
            means.append(dm)
            variances.append(dv)
            out[f"{self.name}.mean.{c}"] = dm
            out[f"{self.name}.variance.{c}"] = dv
        head = {self.name: max(max(means), max(variances)), f"{self.name}.mean_max": max(means),
                f"{self.name}.variance_max": max(variances)}
        return {**head, **out}


PLUGINS = [Il1s(), EigenUtility(), CorrelationChange(), MomentsChange()]
