"""Recursive (c,l)-diversity (Machanavajjhala et al. 2007; ARX ``RecursiveCLDiversity``).

Sort a class's counts of real sensitive values in decreasing order, r_1 >= r_2 >= ... >= r_m
(the typing's missing-value marker ``?`` is no value). The class satisfies the model when it
has at least l distinct real values and

    r_1 < c (r_l + r_{l+1} + ... + r_m).

The headline ``recursive-cl-diversity`` is the largest ratio r_1 / (r_l + ... + r_m) over the
classes with at least l values (the model holds when c is above it and no class has fewer
than l values; those are counted as ``.short_classes``). Checked in DuckDB SQL, and on a
lattice ``Partition`` by :meth:`RecursiveCLDiversity.partition_holds`.

Monotone (Machanavajjhala et al., Thm. 4.1's argument for merged classes): merging two
satisfying classes keeps r_1 < c * tail. Not monotone with suppression: a class containing a
satisfying class may fail (more records of its most frequent value).

pycanon's ``recursive_c_l_diversity`` sorts the counts in *increasing* order and reports
c = max floor(r_min / (sum of the counts from the l-th smallest on) + 1), which is not this
definition (see docs); the tests compare with a direct count instead.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anonflow.api import InputError, Metric, Param, Partition, StepContext, TypedTable
from anonflow_std.common.columns import missing_marker, sensitive_column
from anonflow_std.privacy.published_classes import BY, SENSITIVE, published_classes, real_matrix
from anonflow_std.common.wildcard import refuse_null_qis

__version__ = "0.1.0"

def recursive_ratio(counts: np.ndarray, l: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(r1, tail, distinct)`` per class from an ``(n_classes, m)`` count matrix: the largest
    count, the sum of the l-th largest count and all smaller ones, and the distinct values."""
    c = -np.sort(-np.asarray(counts, dtype=np.float64), axis=1)   # decreasing
    distinct = (c > 0).sum(axis=1)
    r1 = c[:, 0] if c.shape[1] else np.zeros(c.shape[0])
    tail = c[:, l - 1:].sum(axis=1) if c.shape[1] >= l else np.zeros(c.shape[0])
    return r1, tail, distinct


class RecursiveCLDiversity(Metric):
    name = "recursive-cl-diversity"
    version = __version__
    description = ("Recursive (c,l)-diversity: in every class the most frequent sensitive value's count is below c "
                   "times the sum of the l-th largest and smaller counts, in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (Param("c", "float", default=None, nullable=True, above=0.0,
                    help="the multiplier c (default: the claimed c)"),
              Param("l", "int", default=None, nullable=True, min=1, help="the l (default: the claimed l)"),
              BY, SENSITIVE)
    monotone = True
    monotone_with_suppression = False
    weighted_partitions = True

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        refuse_null_qis(ctx, anonymized, self.name)
        s = sensitive_column(anonymized, params.get("sensitive"), self.name)
        claim = anonymized.claims.get(self.name, {})
        c = params.get("c") if params.get("c") is not None else claim.get("c")
        l = params.get("l") if params.get("l") is not None else claim.get("l")
        if l is None:
            raise InputError("recursive-cl-diversity needs 'l' (and 'c' for a verdict), e.g. {c: 3, l: 2}")
        classed = published_classes(anonymized, params, self.name, ctx, s)
        marker = missing_marker(anonymized)
        row = ctx.sql(
            "WITH cv AS (SELECT cls, value, count(*)::DOUBLE AS c FROM classed "
            "WHERE value IS DISTINCT FROM ? GROUP BY cls, value), "
            "ranked AS (SELECT cls, c, row_number() OVER (PARTITION BY cls ORDER BY c DESC, value) AS i FROM cv), "
            "per AS (SELECT cls, max(c) AS r1, coalesce(sum(c) FILTER (WHERE i >= ?), 0) AS tail, count(*) AS d "
            "FROM ranked GROUP BY cls), "
            "allc AS (SELECT DISTINCT cls FROM classed), "
            "full_ AS (SELECT a.cls, coalesce(p.r1, 0) AS r1, coalesce(p.tail, 0) AS tail, coalesce(p.d, 0) AS d "
            "FROM allc a LEFT JOIN per p ON a.cls = p.cls) "
            "SELECT count(*) AS classes, max(r1 / tail) FILTER (WHERE d >= ?) AS worst, "
            "count(*) FILTER (WHERE d < ?) AS short, "
            "count(*) FILTER (WHERE d < ? OR NOT (r1 < ? * tail)) AS violating, "
            "(SELECT count(*) FROM classed WHERE value IS NOT DISTINCT FROM ?) AS missing FROM full_",
            [marker, int(l), int(l), int(l), int(l), float(c or 0.0), marker], classed=classed).to_pylist()[0]
        n = self.name
        out = {n: float(row["worst"] or 0.0), f"{n}.classes": float(row["classes"] or 0),
               f"{n}.short_classes": float(row["short"] or 0), f"{n}.l": float(l)}
        if row["missing"]:
            out[f"{n}.missing_sensitive"] = float(row["missing"])
        if c is not None:
            out.update({f"{n}.c": float(c), f"{n}.violating_classes": float(row["violating"] or 0),
                        f"{n}.holds": float((row["violating"] or 0) == 0)})
        return out

    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        c, l = params.get("c"), params.get("l")
        if c is None or l is None:
            raise InputError("recursive-cl-diversity needs c and l, e.g. model_params: {c: 3, l: 2}")
        s = sensitive_column(partition.table, params.get("sensitive"), self.name)
        counts, _, _ = real_matrix(partition, s)
        r1, tail, distinct = recursive_ratio(counts, int(l))
        return (distinct >= int(l)) & (r1 < float(c) * tail)


PLUGINS = [RecursiveCLDiversity()]
