"""``sensitivity-distance`` (risk): Ds(T_SA), the mean sensitivity distance Ds(E) of the
classes holding a value of the most sensitive levels (SPEC section 7, seed 002), from the
per-class level counts (:func:`level_counts`, DuckDB SQL)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anonflow.api import Grading, InputError, Metric, Param, StepContext, TypedTable, sensitivity_distance

from .. import __version__
from ..common.columns import check_sensitive, grading_of, missing_marker, sensitive_column
from ..common.counts import Sql, counted_part, grading_bounds, sql_literal, table_counts_sql
from ..common.wildcard import refuse_null_qis


def level_counts(sql: Sql, counts_sql: str, tables: Mapping[str, Any], grading: Grading,
                 missing: str | None = None) -> np.ndarray:
    """``(g, lambda + 1)`` matrix of records per (class, level), classes in id order. Records
    whose value is the missing marker ``missing`` have no level and are left out (a class
    holding only such records has a row of zeros)."""
    miss = f"c.value IS NOT DISTINCT FROM {sql_literal(missing)}" if missing is not None else "false"
    rows = sql(f"WITH counts AS ({counts_sql}) SELECT c.cls, CASE WHEN {miss} THEN 0 ELSE b.level END AS level, "
               f"sum(c.c) AS c, count(*) FILTER (WHERE b.level IS NULL AND NOT ({miss})) AS ungraded FROM counts c "
               "LEFT JOIN _bounds b ON c.value = b.value GROUP BY ALL ORDER BY c.cls, level",
               **tables, _bounds=grading_bounds(grading))
    if rows.num_rows and (rows.column("ungraded").to_numpy() > 0).any():
        raise InputError("a sensitive value of the table has no level in the grading")
    cls = rows.column("cls").to_numpy(zero_copy_only=False)
    _, idx = np.unique(cls, return_inverse=True) if len(cls) else (cls, np.zeros(0, dtype=np.int64))
    g = int(idx.max()) + 1 if len(idx) else 0
    out = np.zeros((g, grading.size + 1))
    np.add.at(out, (idx, rows.column("level").to_numpy(zero_copy_only=False).astype(np.int64)),
              rows.column("c").to_numpy(zero_copy_only=False).astype(np.float64))
    out[:, 0] = 0.0  # level 0: the missing values, left out
    return out


class SensitivityDistance(Metric):
    name = "sensitivity-distance"
    version = __version__
    description = ("Ds(T_SA) (SPEC section 7): mean sensitivity distance Ds(E) over the classes holding a value of "
                   "level 1 or 2 (larger: the most sensitive values are mixed with distant levels).")
    category = "risk"
    better = "higher"
    requires_original = False
    params = (
        Param("normalized", "bool", default=False, help="also divide Ds(E) by lambda - 1 (the printed formula)"),
        Param("levels", "int", default=2, min=1,
              help="average over classes holding a value of level <= this (the paper: 2, i.e. L1 or L2)"),
        Param("sensitive", "str", default=None, nullable=True,
              help="the sensitive attribute (default: the only one typed); it must carry a grading"),
    )

    def check(self, params: Mapping[str, Any], **tables: Any) -> None:
        check_sensitive(tables, params, self.name, graded=True)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        refuse_null_qis(ctx, anonymized, self.name)
        s = sensitive_column(anonymized, params["sensitive"], self.name)
        grading = grading_of(anonymized, s, self.name)
        columns, data = counted_part(anonymized)
        counts = level_counts(ctx.sql, table_counts_sql(columns, anonymized.typing.quasi, s),
                              {"published": data}, grading, missing=missing_marker(anonymized))
        ds = sensitivity_distance(counts, grading, normalized=params["normalized"])
        top = min(params["levels"], grading.size)
        chosen = counts[:, 1:top + 1].sum(axis=1) > 0
        n = self.name
        return {n: float(ds[chosen].mean()) if chosen.any() else 0.0,
                f"{n}.classes": float(chosen.sum()),
                f"{n}.all_classes": float(ds.mean()) if ds.size else 0.0}


PLUGINS = [SensitivityDistance()]
