"""``ed-differential-privacy``: (epsilon, delta)-differential privacy through SafePub (Bild,
Kuhn, Prasser, PETS 2018; ARX's ``EDDifferentialPrivacy``), a privacy model the ``lattice``
searches (its SafePub branch: ``generalization/safepub.py``).

The model itself holds the parameters and what they imply: the search's share of epsilon,
the anonymization's rest, and from that rest and delta the sampling probability beta and
the class size k (``common/dp_params``, ARX's computation to the last digit). On a
partition it holds where a class has at least k records (what SafePub enforces on the
sampled records). As a check on a published table it reports the derived figures and the
smallest class, never a verdict: the guarantee is a property of the mechanism (random
sampling, then the node chosen by the exponential mechanism), which no look at the output
can confirm -- nothing about it is claimed by the syntactic checks."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anonflow.api import Metric, Param, Partition, StepContext, TypedTable, sql_ident

from .. import __version__
from ..common.dp_params import SEARCH_SHARE, dp_settings

class EDDifferentialPrivacy(Metric):
    name = "ed-differential-privacy"
    version = __version__
    description = ("(epsilon, delta)-differential privacy by SafePub (ARX's EDDifferentialPrivacy): a model for "
                   "the lattice, which samples the records with probability beta, suppresses every class below "
                   "the derived k and picks the node by the exponential mechanism.")
    category = "privacy"
    requires_original = False
    params = (
        Param("epsilon", "float", default=None, nullable=True, help="the privacy budget epsilon (> 0)"),
        Param("delta", "float", default=None, nullable=True, help="delta, in (0, 1), e.g. 1e-6"),
        Param("search_share", "float", default=SEARCH_SHARE, nullable=True,
              help="the share of epsilon the exponential mechanism's search spends (ARX's default 0.1)"),
        Param("steps", "int", default=None, nullable=True,
              help="the search's steps (default ARX's: 1000 checks // the number of quasi-identifiers)"),
        Param("generalization", "dict", default=None, nullable=True,
              help="a data-independent node {column: level}: no search, all of epsilon to the anonymization"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        quasi = anonymized.typing.quasi
        s = dp_settings(params, len(quasi) or None)
        out = {f"{self.name}.{key}": float(s[key]) for key in ("epsilon", "delta", "beta", "k")}
        if quasi:
            group = ", ".join(sql_ident(c) for c in quasi)
            row = ctx.sql(f"SELECT min(n) AS k FROM (SELECT count(*) AS n FROM published GROUP BY {group})",
                          published=anonymized).to_pylist()[0]
            out[f"{self.name}.smallest_class"] = float(row["k"] or 0)
        return out

    #: a class of at least k sampled records stays one when merged or given more records
    monotone = True
    monotone_with_suppression = True
    weighted_partitions = True

    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        return partition.sizes >= dp_settings(params)["k"]


PLUGINS = [EDDifferentialPrivacy()]
