"""Data shuffling (Muralidhar & Sarathy 2006), sdcMicro ``shuffle(method = "ds")``.

Confidential columns ``X`` (``columns``) are shuffled given non-confidential ones ``S``
(``given``), as sdcMicro's ``shuffleWORK`` does for ``method = "ds"`` with its defaults
(``covmethod = "spearman"``, no weights):

1. each column of ``[X, S]`` becomes normal scores: ``qnorm((rank - 0.5) / n)``, ranks with
   ties averaged;
2. ``R`` = the Spearman rank correlation matrix of ``[X, S]``, turned into the product-moment
   correlation of the normal scores by ``P = 2 sin(pi R / 6)``;
3. the perturbed scores ``Y* = S* B' + e`` with ``B = P_xs P_ss^-1`` (the regression of the
   confidential scores on the given ones) and ``e ~ N(0, P_xx - P_xs P_ss^-1 P_sx)``
   (the conditional covariance), one multivariate normal draw of ``n`` rows from ``ctx.rng``;
4. reverse mapping: in each confidential column, the record with the ``j``-th smallest
   ``Y*`` gets the ``j``-th smallest original value.

So every confidential column publishes exactly its original values (its marginal is kept),
reassigned so that the rank correlations with ``S`` and among ``X`` follow the original's.
sdcMicro's other methods (``ds_cov``, ``ds2``, ``mvn``, ``mlm``), its Pearson/MCD covariances,
weights, categorical predictors (its model matrix of dummies) and its ``gadp`` by-product are
not offered; ``given`` must be numeric columns.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa
from scipy.special import ndtri

from anonflow.api import Algorithm, InputError, Param, StepContext, TypedTable

from .. import __version__
from .noise import column_values, perturbed_columns, publish_columns


def average_ranks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ranks, order)``: the ranks 1 .. n of ``x`` with tied values given their average rank (R's
    ``rank(ties.method = "average")``), and the stable sort order of ``x`` they come from (ties in
    record order), which the reverse mapping reuses."""
    n = x.size
    order = np.argsort(x, kind="stable")
    v = x[order]
    starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])     # first sorted position of each run of ties
    ends = np.r_[starts[1:], n]                               # one past its last
    group = np.repeat(np.arange(starts.size), ends - starts)
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = ((starts + ends + 1) / 2)[group]           # mean of the ranks start+1 .. end
    return ranks, order


def normal_scores(ranks: np.ndarray) -> np.ndarray:
    """``qnorm((rank - 0.5) / n)`` column by column (``ranks``: ``(n, d)``, ties averaged)."""
    return ndtri((ranks - 0.5) / ranks.shape[0])


def shuffle_model(ranks: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(B, Sigma)`` from the average ranks of ``[X, S]`` (the first ``k`` columns are ``X``):
    the regression coefficients ``P_xs P_ss^-1`` and the conditional covariance
    ``P_xx - P_xs P_ss^-1 P_sx`` of the normal scores, with ``P = 2 sin(pi R / 6)`` and ``R``
    the Spearman correlation matrix (the Pearson correlation of the ranks)."""
    R = np.atleast_2d(np.corrcoef(ranks, rowvar=False))
    P = 2 * np.sin(np.pi * R / 6)
    Pxx, Pxs, Pss = P[:k, :k], P[:k, k:], P[k:, k:]
    B = np.linalg.solve(Pss, Pxs.T).T  # Pxs Pss^-1 (Pss symmetric)
    Sigma = Pxx - B @ Pxs.T
    return B, (Sigma + Sigma.T) / 2


def reverse_map(order: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices into a column ``x`` whose stable sort order is ``order``: the record with the
    ``j``-th smallest ``y`` takes the ``j``-th smallest ``x`` (``x[result]`` is the shuffled
    column; ties in ``x`` and in ``y`` are taken in record order)."""
    out = np.empty(order.size, dtype=np.int64)
    by_y = np.argsort(y)  # numpy's fastest sort; its order of tied values is not fixed, so
    if (np.diff(y[by_y]) == 0).any():  # with ties (rare: y is continuous), the stable sort
        by_y = np.argsort(y, kind="stable")
    out[by_y] = order
    return out


class Shuffle(Algorithm):
    name = "shuffle"
    version = __version__
    description = ("Data shuffling (Muralidhar & Sarathy; sdcMicro shuffle, method ds): confidential columns "
                   "reassigned among the records by the ranks of values predicted from the given columns plus noise.")
    params = (
        Param("columns", "list", items="str", help="the confidential numeric columns to shuffle"),
        Param("given", "list", items="str", help="the non-confidential numeric columns they are predicted from"),
        Param("method", "str", default="ds", choices=("ds",), help="sdcMicro's method (only ds is offered)"),
    )
    per_fragment = False

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        cols = perturbed_columns(table, params["columns"], self.name)
        given = perturbed_columns(table, params["given"], self.name, param="given")
        both = sorted(set(cols) & set(given))
        if both:
            raise InputError(f"shuffle: {both[0]!r} is both in 'columns' and in 'given'; a column is either "
                             "shuffled or a predictor")
        if table.num_rows < 3:
            raise InputError(f"shuffle needs at least 3 records; the table has {table.num_rows}")

    def perturbs(self, params: Mapping[str, Any], table: TypedTable | None = None) -> dict[str, dict[str, Any]]:
        what = {"kind": "swap", "method": "shuffle", "variant": params["method"], "columns": list(params["columns"]),
                "given": list(params["given"]), "correlation": "spearman"}
        return {c: dict(what) for c in params["columns"]}

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        self.check(params, table)
        cols, given = list(params["columns"]), list(params["given"])
        n, k = table.num_rows, len(cols)
        ranks = np.empty((n, k + len(given)), dtype=np.float64)
        orders = []
        for j, c in enumerate(cols + given):
            ranks[:, j], order = average_ranks(column_values(table, c, self.name))
            if j < k:
                orders.append(order)
            if ranks[0, j] == (n + 1) / 2 and (ranks[:, j] == ranks[0, j]).all():
                raise InputError(f"shuffle: column {c!r} is constant; it has no ranks to shuffle by")
        try:
            B, Sigma = shuffle_model(ranks, k)
        except np.linalg.LinAlgError:
            raise InputError("shuffle: the 'given' columns are collinear (their rank correlation matrix is "
                             "singular); leave out the redundant ones") from None
        Z = normal_scores(ranks[:, k:])
        Y = Z @ B.T + ctx.rng.multivariate_normal(np.zeros(k), Sigma, size=n, method="eigh", check_valid="ignore")
        new: dict[str, pa.Array] = {}
        for j, c in enumerate(cols):
            col = table.column(c)
            arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            new[c] = arr.take(pa.array(reverse_map(orders[j], Y[:, j])))
        return publish_columns(table, new, ctx)


PLUGINS = [Shuffle()]
