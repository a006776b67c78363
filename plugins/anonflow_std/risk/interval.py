"""Interval disclosure: sdcMicro's ``dRisk`` (``interval-disclosure``) and ``dRiskRMD``
(``interval-disclosure-rmd``), the share of records whose original values an intruder reading
the released values would place in a narrow interval around them.

``interval-disclosure`` (sdcMicro ``R/dRisk.R``, method SDID of Mateo-Sanz, Sebe and
Domingo-Ferrer, 2004).  For column ``j`` let ``s_j`` be the *sample* standard deviation
(divisor ``n - 1``) of the *released* values ``x'_j`` (missing values left out).  Record ``i``
is at risk when, in every column, its original value lies in the closed interval::

    x'_ij - k s_j  <=  x_ij  <=  x'_ij + k s_j          (k = 0.05 by default)

and the measure is the share of records at risk.  A comparison with a missing value (either
side) does not take a record out of risk, as in sdcMicro (``rowSums(..., na.rm = TRUE) == 0``).

``interval-disclosure-rmd`` (sdcMicro ``R/dRiskRMD.R``, Templ and Meindl, 2008), followed
step by step, quirks included:

1. the original columns are standardized by their own mean and sample sd, the released
   columns by *their* own mean and sample sd (R's ``scale`` on each table);
2. ``rmd_i = 0.05 * sqrt(MD_i^2)``, the Mahalanobis distance of the standardized original
   record from the column means (0) under the robust MCD covariance of the standardized
   original (sdcMicro: robustbase's ``covMcd``; here scikit-learn's ``MinCovDet``, reweighted
   and consistency-corrected like it, with a fixed random state: the two MCD implementations
   can differ slightly);
3. record ``i`` is *unsafe* (RMDID1) when in *any* column its standardized released value lies
   strictly inside ``(z_ij - k rmd_i, z_ij + k rmd_i)`` (``k = 0.01`` by default);
   ``risk1`` = unsafe / n, ``wrisk1 = (unsafe count) * sum(rmd of the unsafe) / n``;
4. an unsafe record stays unsafe under RMDID2 when no *other* released record lies within
   Euclidean distance ``k2`` (0.05) of it in the standardized released data: ``risk2`` and
   ``wrisk2`` as in 3 over those records.  sdcMicro computes the full distance matrix; here a
   kd-tree gives each record's nearest other released record.

``interval-disclosure-rmd`` needs scikit-learn (``pip install 'anonflow[ml]'``).
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

import numpy as np

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable

from .. import __version__
from ..common.columns import numeric_columns, numeric_values

__all__ = ["IntervalDisclosure", "IntervalDisclosureRmd", "interval_risk", "rmd_risk"]


def interval_risk(xo: np.ndarray, xm: np.ndarray, k: float) -> tuple[np.ndarray, float]:
    """One column: whether each original value ``xo`` lies outside ``xm +- k * sd(xm)`` (sample
    sd of the released values, NaN left out; a comparison with NaN is not outside), and that sd."""
    sd = float(np.nanstd(xm, ddof=1)) if np.count_nonzero(~np.isnan(xm)) > 1 else float("nan")
    half = k * sd
    return (xo < xm - half) | (xo > xm + half), sd


def _scale(X: np.ndarray) -> np.ndarray:
    """R's ``scale``: centred by the column means, divided by the sample sd. A constant column
    (sd 0) becomes NaN, as in R, and no comparison with it holds."""
    sd = X.std(axis=0, ddof=1)
    centred = X - X.mean(axis=0)
    return np.divide(centred, sd, out=np.full_like(centred, np.nan), where=sd > 0)


def rmd_risk(Xo: np.ndarray, Xm: np.ndarray, k: float = 0.01, k2: float = 0.05,
             random_state: int = 0) -> dict[str, Any]:
    """sdcMicro's ``dRiskRMD`` on complete ``(n, d)`` arrays (see the module docstring):
    ``risk1``, ``risk2``, ``wrisk1``, ``wrisk2``, the boolean ``unsafe1`` / ``unsafe2`` and ``rmd``."""
    from scipy.spatial import cKDTree
    from sklearn.covariance import MinCovDet

    n = Xo.shape[0]
    Zo = _scale(Xo)
    Zm = _scale(Xm)
    varying = ~np.isnan(Zo).any(axis=0)  # R's covMcd fails on a constant column; it is left out here
    if not varying.any():
        raise InputError("interval-disclosure-rmd: every original column is constant; there is no distance to "
                         "measure")
    singular = ("interval-disclosure-rmd: the robust (MCD) covariance of the original columns is singular (on "
                "the half of the records it rests on, some column is constant or a combination of others: many "
                "equal values, such as zeros), and R's mahalanobis() cannot invert it either. Leave such columns out of "
                "columns:, or use interval-disclosure")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            warnings.simplefilter("ignore", UserWarning)  # "not full rank": tested below
            cov = MinCovDet(random_state=random_state).fit(Zo[:, varying]).covariance_
        eig = np.linalg.eigvalsh(cov)
        if not np.all(np.isfinite(eig)) or eig[0] <= 1e-10 * max(eig[-1], 1e-300):
            raise InputError(singular)
        inv = np.linalg.inv(cov)
    except (ValueError, np.linalg.LinAlgError):
        raise InputError(singular)
    centred = Zo[:, varying] - Zo[:, varying].mean(axis=0)
    md2 = np.einsum("ij,jk,ik->i", centred, inv, centred)
    rmd = np.sqrt(np.maximum(md2, 0.0)) * 0.05
    half = (k * rmd)[:, None]
    unsafe1 = ((Zm > Zo - half) & (Zm < Zo + half)).any(axis=1)
    unsafe2 = np.zeros(n, dtype=bool)
    w = np.flatnonzero(unsafe1)
    if w.size and n > 1:
        # a column constant in the released table (NaN after scaling) is the same for every record
        # and adds nothing to a distance (R's dist() would scale the rest up by d / d_used)
        Zd = np.nan_to_num(Zm, nan=0.0)
        dist, _ = cKDTree(Zd).query(Zd[w], k=2)
        unsafe2[w[dist[:, 1] > k2]] = True  # the nearest *other* record (the first is itself, at 0)
    elif w.size:
        unsafe2[w] = True  # one record: no other is near (R: min over nothing is Inf > k2)
    c1, c2 = int(unsafe1.sum()), int(unsafe2.sum())
    return {"risk1": c1 / n if n else 0.0, "risk2": c2 / n if n else 0.0,
            "wrisk1": c1 * float(rmd[unsafe1].sum()) / n if n else 0.0,
            "wrisk2": c2 * float(rmd[unsafe2].sum()) / n if n else 0.0,
            "unsafe1": unsafe1, "unsafe2": unsafe2, "rmd": rmd}


def _columns(original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
             metric: str) -> list[str]:
    return numeric_columns(original if original is not None else anonymized, anonymized, params, metric,
                           hint=" (type them continuous, or name numeric columns with columns:)")


class IntervalDisclosure(Metric):
    name = "interval-disclosure"
    version = __version__
    description = ("Interval disclosure (sdcMicro dRisk): share of records whose original values all lie within "
                   "k sample standard deviations of the released values.")
    category = "risk"
    params = (
        Param("columns", "list", items="str", default=None, nullable=True,
              help="numeric columns compared (default: the continuous quasi-identifiers)"),
        Param("k", "float", default=0.05, min=0.0,
              help="half-width of the interval in standard deviations of the released column (sdcMicro's k)"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        cols = _columns(original, anonymized, params, self.name)
        original = original if original is not None else anonymized  # published unchanged
        k = float(params.get("k", 0.05))
        n = anonymized.num_rows
        outside = np.zeros(n, dtype=bool)
        out: dict[str, float] = {}
        for c in cols:  # one column at a time: two columns of floats in memory, not the tables
            xo = numeric_values(original, [c], self.name)[:, 0]
            xm = numeric_values(anonymized, [c], self.name)[:, 0]
            off, _ = interval_risk(xo, xm, k)
            outside |= off
            out[f"{self.name}.within.{c}"] = (n - int(np.count_nonzero(off))) / n if n else 0.0
        at_risk = n - int(np.count_nonzero(outside))
        return {self.name: at_risk / n if n else 0.0, f"{self.name}.at_risk": float(at_risk),
                f"{self.name}.records": float(n), f"{self.name}.columns": float(len(cols)), **out}


class IntervalDisclosureRmd(Metric):
    name = "interval-disclosure-rmd"
    version = __version__
    description = ("Interval disclosure with robust Mahalanobis distances (sdcMicro dRiskRMD): share of records "
                   "with a released value inside an RMD-scaled interval around the original (needs scikit-learn).")
    category = "risk"
    params = (
        Param("columns", "list", items="str", default=None, nullable=True,
              help="numeric columns compared (default: the continuous quasi-identifiers)"),
        Param("k", "float", default=0.01, min=0.0,
              help="weight of the robust Mahalanobis distance in each interval's half-width (sdcMicro's k)"),
        Param("k2", "float", default=0.05, min=0.0,
              help="RMDID2: an unsafe record with another released record within this distance counts safe"),
    )

    def check(self, params: Mapping[str, Any], **tables: Any) -> None:
        import importlib.util

        if importlib.util.find_spec("sklearn") is None:
            raise InputError("interval-disclosure-rmd needs scikit-learn (robust MCD covariance): "
                             "pip install 'anonflow[ml]'")

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        self.check(params)
        cols = _columns(original, anonymized, params, self.name)
        original = original if original is not None else anonymized  # published unchanged
        Xo = numeric_values(original, cols, self.name)
        Xm = numeric_values(anonymized, cols, self.name)
        if np.isnan(Xo).any() or np.isnan(Xm).any():
            raise InputError("interval-disclosure-rmd: the columns hold missing values, and the robust covariance "
                             "needs complete records; evaluate it on a table without missing values in its columns")
        if Xo.shape[0] <= len(cols) + 1:
            raise InputError(f"interval-disclosure-rmd needs more records than columns + 1 for the robust covariance "
                             f"({Xo.shape[0]} records, {len(cols)} columns)")
        r = rmd_risk(Xo, Xm, float(params.get("k", 0.01)), float(params.get("k2", 0.05)))
        n = Xo.shape[0]
        name = self.name
        return {name: r["risk1"], f"{name}.risk2": r["risk2"], f"{name}.wrisk1": r["wrisk1"],
                f"{name}.wrisk2": r["wrisk2"], f"{name}.unsafe1": float(r["unsafe1"].sum()),
                f"{name}.unsafe2": float(r["unsafe2"].sum()), f"{name}.records": float(n),
                f"{name}.columns": float(len(cols))}


PLUGINS = [IntervalDisclosure(), IntervalDisclosureRmd()]
