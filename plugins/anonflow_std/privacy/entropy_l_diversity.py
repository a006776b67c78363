"""Entropy l-diversity (Machanavajjhala et al. 2007; ARX ``EntropyLDiversity`` with the
Shannon estimator; pycanon ``entropy_l_diversity``).

A class E satisfies it when the entropy of its sensitive values, in **natural logarithms**,

    H(E) = -sum_s p(E, s) ln p(E, s) = ln r - (1 / r) sum_s c_s ln c_s      (p = c_s / r)

is at least ln(l) (c_s: the class's records with value s, r: its records with a real value;
the typing's missing-value marker ``?`` is no value, and a class with no real value fails).
The headline ``entropy-l-diversity`` is the achieved l, exp(min_E H(E)) (a real number;
pycanon reports it rounded down to an integer). Checked in DuckDB SQL, and on a lattice
``Partition`` by :meth:`EntropyLDiversity.partition_holds`.

Monotone: the entropy is concave, so a class merged from classes with H >= ln l has
H >= ln l too. Not monotone with suppression: a class that contains a satisfying class may
fail ({a, b} holds for l = 2; {a, b, a, a} does not).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from anonflow.api import InputError, Metric, Param, Partition, StepContext, TypedTable
from anonflow_std.common.columns import missing_marker, sensitive_column
from anonflow_std.privacy.published_classes import BY, EPS, SENSITIVE, published_classes, real_matrix
from anonflow_std.common.wildcard import refuse_null_qis

__version__ = "0.1.0"

def entropy_per_class(counts: np.ndarray, real: np.ndarray) -> np.ndarray:
    """H(E) in nats per class from an ``(n_classes, m)`` count matrix and each class's real
    records (``-inf`` for a class with no real value)."""
    c = np.asarray(counts, dtype=np.float64)
    r = np.asarray(real, dtype=np.float64)
    clogc = np.where(c > 0, c * np.log(np.where(c > 0, c, 1.0)), 0.0).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.log(np.where(r > 0, r, 1.0)) - clogc / np.where(r > 0, r, 1.0)
    return np.where(r > 0, h, -np.inf)


class EntropyLDiversity(Metric):
    name = "entropy-l-diversity"
    version = __version__
    description = ("Entropy l-diversity: every class's entropy of the sensitive attribute (natural log) is at least "
                   "ln(l); reports exp(least entropy), in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (Param("l", "float", default=None, nullable=True, min=1.0,
                    help="required entropy l: each class's entropy (nats) >= ln(l) (default: the claimed l)"),
              BY, SENSITIVE)
    monotone = True
    monotone_with_suppression = False
    weighted_partitions = True

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        refuse_null_qis(ctx, anonymized, self.name)
        s = sensitive_column(anonymized, params.get("sensitive"), self.name)
        l = params.get("l")
        if l is None:
            l = anonymized.claims.get(self.name, {}).get("l")
        classed = published_classes(anonymized, params, self.name, ctx, s)
        marker = missing_marker(anonymized)
        row = ctx.sql(
            "WITH cv AS (SELECT cls, value, count(*)::DOUBLE AS c, (value IS NOT DISTINCT FROM ?) AS miss "
            "FROM classed GROUP BY cls, value), "
            "per AS (SELECT cls, sum(c) FILTER (WHERE NOT miss) AS r, coalesce(sum(c) FILTER (WHERE miss), 0) AS m, "
            "sum(c * ln(c)) FILTER (WHERE NOT miss) AS clogc FROM cv GROUP BY cls), "
            "ent AS (SELECT cls, m, CASE WHEN r > 0 THEN ln(r) - clogc / r END AS h FROM per) "
            "SELECT count(*) AS classes, min(h) AS least, count(*) FILTER (WHERE h IS NULL) AS no_value, "
            "count(*) FILTER (WHERE h IS NULL OR h < ln(?) - ?) AS violating, sum(m) AS missing, "
            "arg_min(cls, coalesce(h, -1e308)) AS worst FROM ent",
            [marker, float(l or 1.0), EPS], classed=classed).to_pylist()[0]
        n = self.name
        least = row["least"]
        achieved = 0.0 if row["no_value"] or least is None else float(math.exp(least))
        out = {n: achieved, f"{n}.min_entropy": float(least) if least is not None and not row["no_value"] else 0.0,
               f"{n}.classes": float(row["classes"] or 0)}
        if row["missing"]:
            out[f"{n}.missing_sensitive"] = float(row["missing"])
        if row["no_value"]:
            out[f"{n}.classes_without_value"] = float(row["no_value"])
        if l is not None:
            out.update({f"{n}.l": float(l), f"{n}.violating_classes": float(row["violating"] or 0),
                        f"{n}.holds": float((row["violating"] or 0) == 0)})
        return out

    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        l = params.get("l")
        if l is None:
            raise InputError("entropy-l-diversity needs l, e.g. model_params: {l: 3}")
        s = sensitive_column(partition.table, params.get("sensitive"), self.name)
        counts, real, _ = real_matrix(partition, s)
        return entropy_per_class(counts, real) >= math.log(float(l)) - EPS


PLUGINS = [EntropyLDiversity()]
