"""Distance-based record linkage, DBRL: the share of released records an intruder holding the
original records links to their own original by nearest neighbour.

For each released record ``i`` the intruder finds the original records nearest to it and,
when several are equally near, picks one of them at random.  Record ``i`` counts::

    credit_i = 1 / m_i   when its own original is among the m_i nearest (tied) originals,
    credit_i = 0         otherwise,

the probability that the intruder's pick is right, and ``dbrl = sum(credit_i) / n``.  A
record whose own original is the unique nearest counts 1; a released value equidistant to
its own and one other original counts 1/2.  (``dld`` of the microaggregation family counts a
record linked when its own is among the *two* nearest, without dividing; ``dbrl`` is the
one-nearest measure of the record-linkage literature, Domingo-Ferrer and Torra, 2001.)
Given one table (a one-input evaluate step, or ``risk_before``), the table is compared with
itself: the risk of publishing it unchanged (1 unless records repeat).

Distances: Euclidean on the columns standardized by the *original's* mean and population
standard deviation (``numpy.std``), applied to both tables; with ``distance: mahalanobis``
the columns are whitened by the original's covariance (Cholesky factor), so Euclidean
distance there is the Mahalanobis distance under the original's covariance.  A column
constant in the original adds the same amount to every distance from a released record and
so never changes which original is nearest.

Ties: two distances are equal when they agree within a relative ``1e-9`` (plus ``1e-12``
absolute), :data:`dld.REL_TOL` and :data:`dld.ABS_TOL`: the kd-tree and the direct
computation sum squares in different orders, so equal distances can differ in the last bits.

The nearest originals come from ``scipy.spatial.cKDTree`` built over the *distinct* original
points (each with its number of records), never an ``n x n`` matrix: duplicates in the
original then tie by their multiplicity without any search, and only records whose
second-nearest distinct point is also within the tie tolerance (distinct points at equal
distance, which is rare for continuous data) are searched again with more neighbours.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable

from .. import __version__
from ..common.columns import numeric_columns, numeric_values
from .dld import ABS_TOL, REL_TOL

__all__ = ["Dbrl", "link_credits", "whiten"]


def whiten(Xo: np.ndarray, Xm: np.ndarray, distance: str, metric: str = "dbrl") -> tuple[np.ndarray, np.ndarray]:
    """Both tables in coordinates where Euclidean distance is the chosen distance: z-scores by
    the original's mean and population sd (a constant column: sd taken as 1), or the
    original's covariance whitened away (``L^-1 (x - mean)`` with ``cov = L L^T``)."""
    mean = Xo.mean(axis=0)
    if distance == "euclidean":
        std = Xo.std(axis=0)
        std = np.where(std == 0, 1.0, std)
        return (Xo - mean) / std, (Xm - mean) / std
    cov = np.atleast_2d(np.cov(Xo, rowvar=False, ddof=0))
    eig = np.linalg.eigvalsh(cov)
    try:
        if not eig[0] > 1e-12 * eig[-1]:  # singular up to rounding
            raise np.linalg.LinAlgError
        L = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise InputError(f"{metric}: distance: mahalanobis needs the original's covariance matrix to be "
                         "positive definite, and it is singular (a constant column, or a column that is a linear "
                         "combination of others); drop such columns from columns: or use distance: euclidean")
    from scipy.linalg import solve_triangular

    def solve(X: np.ndarray) -> np.ndarray:
        return solve_triangular(L, (X - mean).T, lower=True, check_finite=False).T

    return np.ascontiguousarray(solve(Xo)), np.ascontiguousarray(solve(Xm))


def link_credits(Zo: np.ndarray, Zm: np.ndarray) -> np.ndarray:
    """``credit_i`` of the module docstring for each released record ``Zm[i]`` against the
    originals ``Zo`` (``Zo[i]`` its own): ``1/m_i`` when its own original is among the ``m_i``
    originals at the smallest distance (within the tie tolerance), else 0."""
    from scipy.spatial import cKDTree

    Zo = np.ascontiguousarray(Zo, dtype=np.float64)
    Zm = np.ascontiguousarray(Zm, dtype=np.float64)
    n = Zo.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    diff = Zm - Zo
    own = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    # the distinct original points and how many records each stands for
    points, counts = np.unique(Zo, axis=0, return_counts=True)
    tree = cKDTree(points)
    u = points.shape[0]
    k = min(2, u)
    dist, idx = tree.query(Zm, k=k)
    dist = dist.reshape(n, k)
    idx = idx.reshape(n, k)
    d1 = dist[:, 0]
    bound = d1 * (1.0 + REL_TOL) + ABS_TOL  # everything within it ties with the nearest
    hit = own <= bound
    # m_i: the records of the distinct points within the bound; the nearest point always is
    tied = counts[idx[:, 0]].astype(np.int64)
    if k == 2:
        more = hit & (dist[:, 1] <= bound)  # a second distinct point ties too: search wider
        tied[more] += counts[idx[more, 1]]
        pending = np.flatnonzero(more)
        while pending.size and k < u:
            # the records whose k nearest distinct points all tie: ask for twice as many and count
            # afresh (points at equal distance come back in any order, so a wider query's first k
            # need not be the narrower one's); once the last one returned does not tie, every
            # tying point is among those returned
            k = min(2 * k, u)
            dist_p, idx_p = tree.query(Zm[pending], k=k)
            within = dist_p <= bound[pending, None]
            tied[pending] = (counts[idx_p] * within).sum(axis=1)
            pending = pending[within[:, -1]]
    credit = np.zeros(n, dtype=np.float64)
    credit[hit] = 1.0 / tied[hit]
    return credit


class Dbrl(Metric):
    name = "dbrl"
    version = __version__
    description = ("Distance-based record linkage: share of released records whose nearest original record is "
                   "their own (z-scored Euclidean or Mahalanobis; a tie among m nearest counts 1/m).")
    category = "risk"
    params = (
        Param("columns", "list", items="str", default=None, nullable=True,
              help="numeric columns the intruder links on (default: the continuous quasi-identifiers)"),
        Param("distance", "str", default="euclidean", choices=("euclidean", "mahalanobis"),
              help="euclidean: on the columns z-scored by the original's mean and population sd; "
                   "mahalanobis: under the original's covariance matrix"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        if original is None:  # a one-input evaluate step, or risk_before: the table published unchanged
            original = anonymized
        cols = numeric_columns(original, anonymized, params, self.name,
                               hint=" (type them continuous, or name numeric columns with columns:)")
        Xo = numeric_values(original, cols, self.name)
        Xm = numeric_values(anonymized, cols, self.name)
        if np.isnan(Xo).any() or np.isnan(Xm).any():
            raise InputError("dbrl: the columns hold missing values (a suppressed cell, published as null, has no "
                             "distance to anything); evaluate dbrl on a table without missing values in its columns")
        distance = params.get("distance") or "euclidean"
        Zo, Zm = whiten(Xo, Xm, distance, self.name)
        credit = link_credits(Zo, Zm)
        n = credit.size
        linked = float(credit.sum())
        ctx.note(f"dbrl links on {len(cols)} column(s), {distance} distance: {', '.join(cols)}")
        return {"dbrl": linked / n if n else 0.0, "dbrl.linked": linked,
                "dbrl.unique": float(np.count_nonzero(credit == 1.0)), "dbrl.records": float(n),
                "dbrl.columns": float(len(cols))}


PLUGINS = [Dbrl()]
