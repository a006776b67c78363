"""Privacy checks that count distinct sensitive values per class (SPEC section 3), in DuckDB SQL.

* ``l-diversity`` -- distinct l-diversity: every class holds >= l distinct sensitive values.
* ``p-sensitive-k-anonymity`` -- >= k records and >= p distinct sensitive values per class.

**Classes.** ``by: class`` groups records by ``_class`` (the algorithm's classes; null =
suppressed, left out), ``by: values`` by the published quasi-identifier values (what an
attacker sees: classes publishing the same values are one); see :mod:`.counts`. The default
is ``class`` when the table has ``_class``, else ``values``. For these checks ``class`` is the
stricter reading: merging classes never lowers a class size or a count of distinct values.

Both also implement :meth:`~anonflow.api.Metric.partition_holds`, so a ``lattice`` step can
search for the least-loss generalization satisfying them.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable

from .. import __version__
from ..common.columns import real_distinct, sensitive_column
from ..common.counts import BY, SENSITIVE, claimed, class_counts_sql, grouped_part, grouping
from ..common.wildcard import refuse_null_qis


def _missing_out(out: dict[str, float], metric: str, row: Mapping[str, Any], s: str, ctx: StepContext) -> None:
    """Report the records whose sensitive value is missing: they count as no distinct value."""
    if row["missing"]:
        out[f"{metric}.missing_sensitive"] = float(row["missing"])
        ctx.note(f"{metric}: {row['missing']} record(s) have a missing {s} value; it counts as no distinct value")


def _worst_note(ctx: StepContext, metric: str, row: Mapping[str, Any], what: str) -> None:
    if row.get("worst_class") is not None:
        ctx.note(f"{metric}: worst class {row['worst_class']} ({what})")


def _diversity_report(ctx: StepContext, table: TypedTable, data: pa.Table, s: str, by: str,
                      k: int | None, p: int | None) -> dict[str, Any]:
    """Per class: size n and distinct *real* sensitive values d (the missing-value marker is
    not one). Returns the number of classes, the smallest n and d, the classes with n < k or
    d < p, the records with a missing value, and the worst class (least d, then least n, then
    lowest class number)."""
    query = f"""
        WITH counts AS ({class_counts_sql(table, data, s, by)}),
        per AS (SELECT cls, any_value(n) AS n, count(*) FILTER (WHERE NOT miss) AS d,
                       coalesce(sum(c) FILTER (WHERE miss), 0) AS m FROM counts GROUP BY cls)
        SELECT (SELECT count(*) FROM per) AS classes, (SELECT min(n) FROM per) AS smallest,
               (SELECT min(d) FROM per) AS least, (SELECT coalesce(sum(m), 0) FROM per) AS missing,
               (SELECT count(*) FROM per WHERE n < ? OR d < ?) AS violating,
               w.cls AS worst_class, w.n AS worst_size, w.d AS worst_distinct
        FROM (SELECT 1) dummy LEFT JOIN (SELECT * FROM per ORDER BY d, n, cls LIMIT 1) w ON true
    """
    return ctx.sql(query, [int(k or 0), int(p or 0)], published=data).to_pylist()[0]


class LDiversity(Metric):
    name = "l-diversity"
    version = __version__
    description = ("Distinct l-diversity (SPEC section 3): the least number of distinct sensitive values in a class, "
                   "in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (Param("l", "int", default=None, nullable=True, min=1,
                    help="required distinct values per class (default: the claimed l, else the claimed p)"),
              BY, SENSITIVE)
    #: merging classes, or adding records to one, never lowers its number of distinct values.
    monotone = True
    monotone_with_suppression = True

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        refuse_null_qis(ctx, anonymized, self.name)
        s = sensitive_column(anonymized, params["sensitive"], self.name)
        by = grouping(anonymized, params, self.name)
        l = params["l"] if params["l"] is not None else claimed(anonymized, "l")
        row = _diversity_report(ctx, anonymized, grouped_part(anonymized, by), s, by, None, l)
        out = {"l-diversity": float(row["least"] or 0), "l-diversity.classes": float(row["classes"] or 0)}
        _missing_out(out, self.name, row, s, ctx)
        if row["worst_class"] is not None and by == "class":
            out["l-diversity.worst_class"] = float(row["worst_class"])
        if l is not None:
            out.update({"l-diversity.l": float(l), "l-diversity.violating_classes": float(row["violating"]),
                        "l-diversity.holds": float(row["violating"] == 0)})
            if row["violating"]:
                _worst_note(ctx, self.name, row, f"{row['worst_distinct']} distinct {s} value(s), l = {l}")
        return out

    #: counts through sizes, counts(), distinct() and codes() only (see Metric)
    weighted_partitions = True

    def partition_holds(self, partition: Any, params: Mapping[str, Any]) -> np.ndarray:
        l = params.get("l")
        if l is None:
            raise InputError("l-diversity needs l, e.g. model_params: {l: 3}")
        s = sensitive_column(partition.table, params.get("sensitive"), self.name)
        return real_distinct(partition, s) >= l


class PSensitiveKAnonymity(Metric):
    name = "p-sensitive-k-anonymity"
    version = __version__
    description = ("p-sensitive k-anonymity (SPEC section 3): every class has >= k records and >= p distinct sensitive "
                   "values, in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (Param("k", "int", default=None, nullable=True, min=1, help="class size (default: the claimed k)"),
              Param("p", "int", default=None, nullable=True, min=1,
                    help="distinct sensitive values per class (default: the claimed p)"),
              BY, SENSITIVE)
    monotone = True
    monotone_with_suppression = True

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        refuse_null_qis(ctx, anonymized, self.name)
        s = sensitive_column(anonymized, params["sensitive"], self.name)
        by = grouping(anonymized, params, self.name)
        k = params["k"] if params["k"] is not None else claimed(anonymized, "k")
        p = params["p"] if params["p"] is not None else claimed(anonymized, "p")
        if k is None or p is None:
            raise InputError("p-sensitive-k-anonymity needs 'k' and 'p' (no algorithm claims them for this table)")
        row = _diversity_report(ctx, anonymized, grouped_part(anonymized, by), s, by, k, p)
        n = self.name
        out = {n: float(row["least"] or 0), f"{n}.smallest_class": float(row["smallest"] or 0),
               f"{n}.classes": float(row["classes"] or 0), f"{n}.k": float(k), f"{n}.p": float(p),
               f"{n}.violating_classes": float(row["violating"]), f"{n}.holds": float(row["violating"] == 0)}
        if row["worst_class"] is not None and by == "class":
            out[f"{n}.worst_class"] = float(row["worst_class"])
        _missing_out(out, n, row, s, ctx)
        if row["violating"]:
            _worst_note(ctx, n, row, f"{row['worst_size']} record(s), {row['worst_distinct']} distinct {s} value(s); "
                                     f"k = {k}, p = {p}")
        return out

    #: counts through sizes, counts(), distinct() and codes() only (see Metric)
    weighted_partitions = True

    def partition_holds(self, partition: Any, params: Mapping[str, Any]) -> np.ndarray:
        k, p = params.get("k"), params.get("p")
        if k is None or p is None:
            raise InputError("p-sensitive-k-anonymity needs k and p, e.g. model_params: {k: 10, p: 5}")
        s = sensitive_column(partition.table, params.get("sensitive"), self.name)
        return (np.asarray(partition.sizes) >= k) & (real_distinct(partition, s) >= p)


PLUGINS = [LDiversity(), PSensitiveKAnonymity()]
