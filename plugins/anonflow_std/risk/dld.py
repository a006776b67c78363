"""Distance-based record linkage disclosure risk, DLD (SPEC section 8, seed 003 section 2.2.2).

An intruder holding the original records links each masked (published) record to the
original records nearest to it.  For masked record ``i`` let ``d_(1) <= d_(2)`` be the two
smallest Euclidean distances from it to the ``n`` original records (both tables
standardized with the *original's* mean and population standard deviation).  Record ``i``
is *linked* when its own original is among the two nearest, counting every original at
the second-nearest distance (ties)::

    linked_i  <=>  |masked_i - original_i| <= d_(2)
              <=>  at most one original record is strictly nearer than its own

and ``DLD = linked / n`` (a fraction in [0, 1], not a percentage).

The two smallest distances come from a kd-tree over the original records
(``scipy.spatial.cKDTree``), never an ``n x n`` matrix; the own distance is computed
directly.  The tree computes its distances in a different order, so equal distances can
differ in the last bits: the comparison allows a relative ``1e-9`` (plus ``1e-12``
absolute, for distances that are 0 in exact arithmetic).  Rounding errors are below
``1e-15`` relative for these sums of a few squares, so only distances that agree to nine
significant digits are treated as ties.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable

from .. import __version__
from ..common.columns import numeric_columns, numeric_values

__all__ = ["Dld", "linked_records"]

#: relative and absolute tolerance of the tie comparison (see the module docstring)
REL_TOL = 1e-9
ABS_TOL = 1e-12


def linked_records(Zo: np.ndarray, Zm: np.ndarray) -> np.ndarray:
    """Boolean array: masked record ``i`` (``Zm[i]``) is linked to its original ``Zo[i]``."""
    from scipy.spatial import cKDTree

    Zo = np.ascontiguousarray(Zo, dtype=np.float64)
    Zm = np.ascontiguousarray(Zm, dtype=np.float64)
    n = Zo.shape[0]
    if n == 0:
        return np.zeros(0, dtype=bool)
    if n == 1:
        return np.ones(1, dtype=bool)
    dist, _ = cKDTree(Zo).query(Zm, k=2)
    second = dist[:, 1]
    diff = Zm - Zo
    own = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return own <= second * (1.0 + REL_TOL) + ABS_TOL


class Dld(Metric):
    name = "dld"
    version = __version__
    description = ("Distance-based linkage disclosure risk: fraction of published records whose original is "
                   "among the two nearest original records (z-scored Euclidean; SPEC section 8).")
    category = "risk"
    params = (
        Param("columns", "list", items="str", default=None, nullable=True,
              help="numeric columns the intruder links on (default: the continuous quasi-identifiers)"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        cols = numeric_columns(original, anonymized, params, self.name,
                               hint=" (type them continuous, or name them with columns:)")
        Xo = numeric_values(original, cols, self.name)
        Xm = numeric_values(anonymized, cols, self.name)
        if np.isnan(Xo).any() or np.isnan(Xm).any():
            raise InputError("dld: the columns hold missing values (a suppressed cell, published as null, has no "
                             "distance to anything); evaluate dld on a table without suppressed cells in its columns")
        mean = Xo.mean(axis=0)
        std = Xo.std(axis=0)
        std = np.where(std == 0, 1.0, std)
        linked = linked_records((Xo - mean) / std, (Xm - mean) / std)
        n = linked.size
        return {"dld": float(linked.sum()) / n if n else 0.0, "dld.linked": float(linked.sum()),
                "dld.records": float(n)}


PLUGINS = [Dld()]
