"""Thresholds on the prosecutor re-identification risk (ARX ``AverageReidentificationRisk``
and its highest-risk bound; El Emam's prosecutor model).

A record in a class of f records is re-identified by a prosecutor with probability 1 / f.
Over the published records (suppressed ones left out), n records in C classes:

* ``average-risk`` -- the average risk (1/n) sum_records 1/f = C / n (ARX:
  1 / average class size); holds when C / n <= max. All records suppressed: holds (as ARX).
* ``highest-risk`` -- the highest risk 1 / min f; holds when every class has f * max >= 1
  (1e-9 slack), i.e. f >= 1/max. ARX rounds 1/max to a class size with 1% relative precision
  (``ParameterTranslation.getSizeThreshold``); this check uses the exact bound.

The average risk is not a property of a class: :meth:`AverageRisk.partition_holds` answers
for the whole partition the way ARX enforces it with suppression: it suppresses the
smallest classes (ties: lowest class number first) until C' / n' <= max, fewest classes
first (so fewest records: for a number j of suppressed classes the j smallest suppress the
fewest records and leave the lowest risk), and returns False for those classes, True for the
rest (all True when the partition holds as it is). Without suppression a node passes only
if it holds as it is. Monotone: merging classes lowers C for the same n; with suppression,
the records a generalization must suppress are never more (the classes of the coarser node
made only of suppressed finer classes cover a solution), so both flags are true.

Suppressed cells (nulls in the published QIs, ``by: values``) match any value
(``.wildcard``; docs/algorithms.md, "Suppressed cells as wildcards"): a record's risk is
1 / its compatible count f, so ``average-risk`` is the mean of 1 / f over the records and
``highest-risk`` is 1 / min f (``.classes``: the distinct published keys). ``by: class`` counts
class ids, as always; a lattice partition never holds a null (it suppresses whole records).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import InputError, Metric, Param, Partition, StepContext, TypedTable
from anonflow_std.privacy.published_classes import BY, EPS, published_classes
from anonflow_std.common.wildcard import COUNT, key_counts, null_records

__version__ = "0.1.0"

def smallest_first(sizes: np.ndarray, max_risk: float) -> np.ndarray:
    """Which classes stay when the smallest ones are suppressed (stable order) until the
    average risk classes / records of the rest is at most ``max_risk``."""
    sizes = np.asarray(sizes, dtype=np.float64)
    c = sizes.shape[0]
    if c == 0:
        return np.zeros(0, dtype=bool)
    order = np.argsort(sizes, kind="stable")
    removed = np.concatenate([[0.0], np.cumsum(sizes[order])])          # records suppressed with j classes
    j = np.arange(c + 1, dtype=np.float64)
    left = sizes.sum() - removed
    ok = (c - j) <= max_risk * left + EPS * np.maximum(left, 1.0)
    ok[-1] = True                                                        # all suppressed: holds (ARX)
    first = int(np.flatnonzero(ok)[0])
    keep = np.ones(c, dtype=bool)
    keep[order[:first]] = False
    return keep


def _wildcard_sizes(table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> pa.Table | None:
    """With nulls in the published QIs (``by: values``): ``(n, f)`` per distinct published key,
    ``n`` its records and ``f`` its compatible count (a suppressed cell matches any value, so a
    prosecutor's candidates for a record are the f records compatible with it); None without a
    null (the classes are then counted as always)."""
    if (params.get("by") or "values") != "values":
        return None
    quasi = [q for q in table.typing.quasi if q in table.columns]
    if not quasi or not null_records(ctx, table, quasi):
        return None
    keys = key_counts(ctx, table, quasi)
    return pa.table({"n": keys.column("_af_n"), "f": keys.column(COUNT)})


def _class_sizes(table: TypedTable, params: Mapping[str, Any], plugin: str, ctx: StepContext) -> pa.Table:
    classed = published_classes(table, params, plugin, ctx)
    return ctx.sql("SELECT cls, count(*)::BIGINT AS n FROM classed GROUP BY cls", classed=classed)


class AverageRisk(Metric):
    name = "average-risk"
    version = __version__
    description = ("Average prosecutor re-identification risk: classes / records of the published table, at most max "
                   "(ARX's average re-identification risk), in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (Param("max", "float", default=None, nullable=True, min=0.0, max=1.0,
                    help="largest average risk allowed (default: the claimed max)"), BY)
    monotone = True
    monotone_with_suppression = True
    weighted_partitions = True

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        mx = params.get("max") if params.get("max") is not None else anonymized.claims.get(self.name, {}).get("max")
        wild = _wildcard_sizes(anonymized, params, ctx)
        if wild is not None:  # the mean of 1 / compatible count over the records
            row = ctx.sql("SELECT coalesce(sum(n / f), 0) AS risk, count(*) AS keys, coalesce(sum(n), 0) AS records "
                          "FROM w", w=wild).to_pylist()[0]
            records = int(row["records"])
            n = self.name
            out = {n: float(row["risk"]) / records if records else 0.0, f"{n}.classes": float(row["keys"]),
                   f"{n}.records": float(records)}
            if mx is not None:
                ok = records == 0 or float(row["risk"]) <= mx * records + EPS * max(records, 1)
                out.update({f"{n}.max": float(mx), f"{n}.holds": float(ok)})
            return out
        sizes = _class_sizes(anonymized, params, self.name, ctx)
        row = ctx.sql("SELECT count(*) AS classes, coalesce(sum(n), 0) AS records FROM sizes",
                      sizes=sizes).to_pylist()[0]
        classes, records = int(row["classes"]), int(row["records"])
        n = self.name
        out = {n: classes / records if records else 0.0, f"{n}.classes": float(classes),
               f"{n}.records": float(records)}
        if mx is not None:
            ok = records == 0 or classes <= mx * records + EPS * max(records, 1)
            out.update({f"{n}.max": float(mx), f"{n}.holds": float(ok)})
        return out

    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        mx = params.get("max")
        if mx is None:
            raise InputError("average-risk needs max, e.g. model_params: {max: 0.05}")
        return smallest_first(np.asarray(partition.sizes), float(mx))


class HighestRisk(Metric):
    name = "highest-risk"
    version = __version__
    description = ("Highest prosecutor re-identification risk: 1 / smallest class of the published table, at most max, "
                   "in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (Param("max", "float", default=None, nullable=True, above=0.0, max=1.0,
                    help="largest risk of any record (default: the claimed max)"), BY)
    monotone = True
    monotone_with_suppression = True
    weighted_partitions = True

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        mx = params.get("max") if params.get("max") is not None else anonymized.claims.get(self.name, {}).get("max")
        wild = _wildcard_sizes(anonymized, params, ctx)
        if wild is not None:  # compatible counts for class sizes: a key of compatible count f, n records
            row = ctx.sql("SELECT count(*) AS classes, min(f) AS smallest, "
                          "count(*) FILTER (WHERE f * ? < 1 - ?) AS violating, "
                          "coalesce(sum(n) FILTER (WHERE f * ? < 1 - ?), 0) AS at_risk FROM w",
                          [float(mx or 1.0), EPS, float(mx or 1.0), EPS], w=wild).to_pylist()[0]
        else:
            sizes = _class_sizes(anonymized, params, self.name, ctx)
            row = ctx.sql("SELECT count(*) AS classes, min(n) AS smallest, "
                          "count(*) FILTER (WHERE n * ? < 1 - ?) AS violating, "
                          "coalesce(sum(n) FILTER (WHERE n * ? < 1 - ?), 0) AS at_risk FROM sizes",
                          [float(mx or 1.0), EPS, float(mx or 1.0), EPS], sizes=sizes).to_pylist()[0]
        n = self.name
        smallest = row["smallest"]
        out = {n: 1.0 / smallest if smallest else 0.0, f"{n}.classes": float(row["classes"] or 0),
               f"{n}.smallest_class": float(smallest or 0)}
        if mx is not None:
            out.update({f"{n}.max": float(mx), f"{n}.violating_classes": float(row["violating"] or 0),
                        f"{n}.records_at_risk": float(row["at_risk"] or 0),
                        f"{n}.holds": float((row["violating"] or 0) == 0)})
        return out

    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        mx = params.get("max")
        if mx is None:
            raise InputError("highest-risk needs max, e.g. model_params: {max: 0.2}")
        return np.asarray(partition.sizes, dtype=np.float64) * float(mx) >= 1.0 - EPS


PLUGINS = [AverageRisk(), HighestRisk()]
