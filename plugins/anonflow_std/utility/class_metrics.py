"""Utility metrics over the classes of a published table (seed 000, SPEC section 4).

* ``avg-il`` -- AVG-IL(Q) = mean over classes of IL(G) / (|G| |QI|), eq. 17-18, with IL(G) =
  sum of the SPEC section 1 distances of G's *original* records to G's centroid (mean, convex
  median, frequency vector, medoid), computed from the original table and the classes of the
  anonymized one with :mod:`anonflow_std.common`.
* ``avg-ent`` -- AVG-Ent(Q) = mean over classes of Ent(G) = -sum p_s log2 p_s of the sensitive
  attribute, eq. 19 (DuckDB SQL).
* ``cavg`` -- CAVG = (n / |Q|) / k, eq. 20 (DuckDB SQL).

Classes are grouped ``by: class`` or ``by: values`` (:mod:`anonflow_std.common.counts`); the
default is ``class`` when the table has ``_class``, else ``values``.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, ROW, InputError, Metric, Param, StepContext, TypedTable, sql_ident
from anonflow_std.common.distance import il_by_class
from anonflow_std.common.encode import encode

from .. import __version__
from ..common.columns import sensitive_column
from ..common.counts import BY, SENSITIVE, claimed, class_counts_sql, grouped_part, grouping, published_part


def class_sizes_sql(table: TypedTable, by: str) -> str:
    """SQL giving each class's size ``n`` of the table registered as ``published``."""
    if by == "class":
        return f"SELECT count(*) AS n FROM published GROUP BY {sql_ident(CLASS)}"
    return f"SELECT count(*) AS n FROM published GROUP BY {', '.join(sql_ident(q) for q in table.typing.quasi)}"


class AvgIl(Metric):
    name = "avg-il"
    version = __version__
    description = ("AVG-IL (seed 000 eq. 17-18): mean over classes of IL(G) / (|G| |QI|), IL of the original records "
                   "to their class centroid by the SPEC section 1 distances.")
    category = "utility"
    requires_original = True
    params = (BY,)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        by = grouping(anonymized, params, self.name)
        quasi = original.typing.quasi
        if not quasi:
            raise InputError("avg-il needs the quasi-identifiers typed in the original table")
        data = published_part(anonymized)
        if by == "class":
            keys = data.column(CLASS).to_numpy(zero_copy_only=False)
        else:
            # number the distinct published QI combinations (in SQL: one dense_rank)
            order = ", ".join(sql_ident(q) for q in anonymized.typing.quasi)
            ranked = ctx.sql(f"SELECT {sql_ident(ROW)} AS r, dense_rank() OVER (ORDER BY {order}) - 1 AS c "
                             f"FROM published ORDER BY {sql_ident(ROW)}", published=data)
            data = pa.table({ROW: ranked.column("r"), CLASS: ranked.column("c")})
            keys = data.column(CLASS).to_numpy(zero_copy_only=False)
        rows = data.column(ROW).to_numpy(zero_copy_only=False)
        orig_rows = original.rows()
        order = np.argsort(rows, kind="stable")
        at = np.searchsorted(rows[order], orig_rows)
        found = (at < rows.shape[0]) & (rows[order][np.minimum(at, rows.shape[0] - 1)] == orig_rows)
        if not found.all():
            missing = int(orig_rows[~found][0])
            raise InputError(f"avg-il: record _row = {missing} of the original table is not in the anonymized one")
        if rows.shape[0] != orig_rows.shape[0]:
            raise InputError("avg-il: the anonymized table holds records that are not in the original one")
        _, labels = np.unique(keys[order][at], return_inverse=True)
        labels = labels.ravel().astype(np.int64)
        g = int(labels.max()) + 1 if labels.size else 0
        il = il_by_class(encode(original, quasi), labels, g)
        sizes = np.bincount(labels, minlength=g)
        per_class = il / (sizes * len(quasi))
        return {"avg-il": float(per_class.mean()) if g else 0.0,
                "avg-il.max": float(per_class.max()) if g else 0.0,
                "avg-il.total": float(il.sum()),
                "avg-il.per_record": float(il.sum() / (labels.size * len(quasi))) if labels.size else 0.0,
                "avg-il.classes": float(g)}


class AvgEnt(Metric):
    name = "avg-ent"
    version = __version__
    description = "AVG-Ent (seed 000 eq. 19): mean over classes of the entropy (bits) of the sensitive attribute."
    category = "utility"
    better = "higher"
    requires_original = False
    params = (BY, SENSITIVE)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        s = sensitive_column(anonymized, params["sensitive"], self.name)
        by = grouping(anonymized, params, self.name)
        data = grouped_part(anonymized, by)
        row = ctx.sql(
            f"WITH counts AS ({class_counts_sql(anonymized, data, s, by)}), "
            "ent AS (SELECT cls, coalesce(-sum((c / r) * log2(c / r)) FILTER (WHERE NOT miss), 0) AS e, "
            "coalesce(sum(c) FILTER (WHERE miss), 0) AS m FROM counts GROUP BY cls) "
            "SELECT avg(e) AS mean, min(e) AS least, max(e) AS most, count(*) AS classes, sum(m) AS missing FROM ent",
            published=data).to_pylist()[0]
        out = {"avg-ent": float(row["mean"] or 0.0), "avg-ent.min": float(row["least"] or 0.0),
               "avg-ent.max": float(row["most"] or 0.0), "avg-ent.classes": float(row["classes"] or 0)}
        if row["missing"]:  # entropy over the real values only: a missing value adds none
            out["avg-ent.missing_sensitive"] = float(row["missing"])
        return out


class Cavg(Metric):
    name = "cavg"
    version = __version__
    description = "CAVG (seed 000 eq. 20, LeFevre et al.): (records / classes) / k; 1 is the ideal."
    category = "utility"
    requires_original = False
    params = (Param("k", "int", default=None, nullable=True, min=1,
                    help="the k of the model (default: the k the algorithm claims)"), BY)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        k = params["k"] if params["k"] is not None else claimed(anonymized, "k")
        if k is None:
            raise InputError("cavg needs 'k' (no algorithm claims one for this table)")
        by = grouping(anonymized, params, self.name)
        data = grouped_part(anonymized, by)
        row = ctx.sql(f"SELECT count(*) AS classes, coalesce(sum(n), 0) AS records FROM ({class_sizes_sql(anonymized, by)})",
                      published=data).to_pylist()[0]
        classes, records = int(row["classes"]), int(row["records"])
        value = records / classes / k if classes else 0.0
        return {"cavg": float(value), "cavg.classes": float(classes), "cavg.records": float(records),
                "cavg.k": float(k)}


PLUGINS = [AvgIl(), AvgEnt(), Cavg()]
