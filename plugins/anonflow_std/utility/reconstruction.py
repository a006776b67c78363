"""``reconstruction-distance`` (utility): the average reconstruction distance Dis(T) (SPEC
section 7, seed 002 eq. 3-6), in its lossy-join form (from each class's value counts,
:func:`lossy_join_distance`, DuckDB SQL) or its generalized form (from the original values
each published value covers, :func:`covered_values`)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable, value_keys

from .. import __version__
from ..common.columns import aligned, check_sensitive, sensitive_column, typed_input
from ..common.counts import Sql, counted_part, table_counts_sql


def lossy_join_distance(sql: Sql, counts_sql: str, tables: Mapping[str, Any]) -> dict[str, float]:
    """Dis(T) of a lossy-join publication (SPEC section 7, seed 002 eq. 5-6).

    err(t) = (1 - c(t[S])/|E|)^2 + sum_{v != t[S]} (c(v)/|E|)^2 = 1 - 2 p_s + sum_v p_v^2, so a
    class E contributes sum_{t in E} err(t) = |E| - sum_v c(v)^2 / |E|; Dis(T) is the mean
    over records."""
    row = sql(f"WITH counts AS ({counts_sql}), "
              "per_class AS (SELECT cls, sum(c) AS n, sum(c * c) AS sq FROM counts GROUP BY cls) "
              "SELECT sum(n - sq / n ORDER BY cls) AS total, sum(n) AS records, count(*) AS classes FROM per_class",
              **tables).to_pylist()[0]
    records = float(row["records"] or 0)
    return {"dis": float(row["total"] or 0.0) / records if records else 0.0, "records": records,
            "classes": float(row["classes"] or 0)}


def covered_values(original: TypedTable, anonymized: TypedTable, column: str) -> np.ndarray:
    """L(QI_i) of every record: the number of original values its published value covers.

    A value equal to the original covers 1. A value generalized through the column's
    hierarchy (attached to the anonymized or the original table) covers the level-0 values
    under it (:meth:`Hierarchy.leaves_under` at the lowest level where it is the record's
    ancestor). ``*`` without a hierarchy covers every distinct value of the original column.
    Anything else is an error naming the column and the value."""
    orig = original.data.column(column).combine_chunks()
    pub = anonymized.data.column(column).combine_chunks()
    okeys = value_keys(orig)
    pkeys = value_keys(pub)
    same = pc.fill_null(pc.equal(okeys, pkeys), False).to_numpy(zero_copy_only=False)
    L = np.ones(len(orig), dtype=np.float64)
    if same.all():
        return L
    h = anonymized.hierarchies.get(column) or original.hierarchies.get(column)
    todo = ~same
    if h is not None:
        rows = h.codes(orig)
        safe = pa.array(np.maximum(rows, 0))
        found = np.zeros(len(orig), dtype=bool)
        for level in range(h.height + 1):
            anc = pc.take(h.level(level), safe)
            hit = pc.fill_null(pc.equal(anc, pkeys), False).to_numpy(zero_copy_only=False) & todo & ~found & (rows >= 0)
            if hit.any():
                L[hit] = h.leaves_under(level)[rows[hit]]
                found |= hit
        todo &= ~found
    if todo.any():
        star = pc.fill_null(pc.equal(pkeys, "*"), False).to_numpy(zero_copy_only=False) & todo
        if star.any():
            L[star] = len(pc.unique(orig))
            todo &= ~star
    if todo.any():
        i = int(np.flatnonzero(todo)[0])
        raise InputError(f"reconstruction-distance (form: generalized): column {column!r} publishes "
                         f"{pub[i].as_py()!r} for the original value {orig[i].as_py()!r}, which is neither the "
                         "original value nor an ancestor of it in the column's hierarchy; attach the hierarchy "
                         "(hierarchy step) or use form: lossy-join")
    return L


class ReconstructionDistance(Metric):
    name = "reconstruction-distance"
    version = __version__
    description = ("Average reconstruction distance Dis(T) (SPEC section 7, seed 002 eq. 3-6): lossy-join form from "
                   "the class's value counts, or generalized form err(t) = 1 - 1/V.")
    category = "utility"
    requires_original = False
    params = (
        Param("form", "str", default="lossy-join", choices=("lossy-join", "generalized"),
              help="lossy-join: QI exact, S estimated from the class's counts; generalized: QI generalized "
                   "(needs [original, anonymized]), S exact"),
        Param("sensitive", "str", default=None, nullable=True,
              help="the sensitive attribute (default: the only one typed)"),
    )

    def check(self, params: Mapping[str, Any], **tables: Any) -> None:
        if params.get("form", "lossy-join") == "lossy-join":
            check_sensitive(tables, params, self.name)
        else:
            table = typed_input(tables)
            if table is not None and not table.typing.quasi:
                raise InputError("reconstruction-distance needs quasi-identifiers in the typing of its input")

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        n = self.name
        if params["form"] == "lossy-join":
            s = sensitive_column(anonymized, params["sensitive"], self.name)
            columns, data = counted_part(anonymized)
            res = lossy_join_distance(ctx.sql, table_counts_sql(columns, anonymized.typing.quasi, s),
                                      {"published": data})
            return {n: res["dis"], f"{n}.records": res["records"], f"{n}.classes": res["classes"],
                    **self._suppressed(res["dis"], res["records"], ctx)}
        if original is None:
            raise InputError("reconstruction-distance with form: generalized compares published with original "
                             "values: give the evaluate step two inputs, [original, anonymized]")
        aligned(original, anonymized, self.name)
        quasi = anonymized.typing.quasi
        if not quasi:
            raise InputError("reconstruction-distance needs quasi-identifiers in the typing of its input")
        V = np.ones(anonymized.num_rows)
        for q in quasi:
            V *= covered_values(original, anonymized, q)
        err = 1.0 - 1.0 / V
        dis = float(err.mean()) if err.size else 0.0
        return {n: dis, f"{n}.records": float(err.size), f"{n}.mean_cells": float(V.mean()) if V.size else 0.0,
                **self._suppressed(dis, err.size, ctx)}

    def _suppressed(self, dis: float, records: float, ctx: StepContext) -> dict[str, float]:
        """With records suppressed: Dis over all the original's records, a suppressed record
        counting as err = 1 (nothing of it can be reconstructed)."""
        if not ctx.suppressed:
            return {}
        total = records + ctx.suppressed
        return {f"{self.name}.suppressed": float(ctx.suppressed),
                f"{self.name}.with_suppressed": (dis * records + ctx.suppressed) / total}


PLUGINS = [ReconstructionDistance()]
