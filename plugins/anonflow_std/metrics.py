"""The two metrics of the first MDAV workflow, and the helpers other metric modules share.

* ``sse-il`` (utility): information loss IL = 100 * SSE / SST of a microaggregated table on
  the z-scored numeric quasi-identifiers (SPEC section 8).
* ``k-anonymity`` (privacy check): the smallest class, by published QI values or by
  ``_class`` (DuckDB SQL), and, for the ``lattice`` search, the same check on a
  :class:`~anonflow.api.Partition` (``partition_holds``).
* Helpers: :func:`aligned` (two inputs hold the same records in ``_row`` order),
  :func:`numeric_columns` (the columns a record-by-record numeric metric compares; ``dld``
  uses it), :func:`numeric_values` (those columns as numbers, failing in one line on
  generalized labels); :func:`sql_ident` (quote a column name for ``ctx.sql``) comes from :mod:`anonflow.api`.

The other metrics live beside the algorithms they belong to: ``metrics_groups`` (per-class
metrics, l-diversity, p-sensitive k-anonymity), ``alphak`` ((alpha,k) and (alpha_i,k) checks,
sensitivity and reconstruction distances), ``utility`` (hierarchy losses, classification
accuracy), ``lclustering`` (generalization and relative loss) and ``linkage`` (DLD).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anonflow.api import (CLASS, ROW, InputError, Metric, Param, Partition, StepContext, TypedTable, generalization,
                          numeric_column, sql_ident)

from . import __version__
from .common import zscores


def aligned(original: TypedTable, anonymized: TypedTable, metric: str, ctx: StepContext | None = None) -> None:
    """Both tables must hold the same records in the same (``_row``) order (checked in SQL
    when a context is given: the tables may be in the store)."""
    if ctx is not None and original.num_rows == anonymized.num_rows:
        r = sql_ident(ROW)
        odd = ctx.sql(f"SELECT count(*) AS n FROM o POSITIONAL JOIN a WHERE o.{r} IS DISTINCT FROM a.{r}",
                      o=original, a=anonymized).column(0)[0].as_py()
        same = odd == 0
    else:
        same = original.num_rows == anonymized.num_rows and np.array_equal(original.rows(), anonymized.rows())
    if not same:
        raise InputError(f"metric {metric!r} compares records one to one, but the two inputs hold different "
                         f"records ({original.num_rows} vs {anonymized.num_rows}); give it [original, anonymized] "
                         "from the same workflow")


def numeric_columns(original: TypedTable, anonymized: TypedTable, params: Mapping[str, Any], metric: str,
                    hint: str = "") -> list[str]:
    """The columns a record-by-record numeric metric compares.

    ``params["columns"]``, by default the continuous quasi-identifiers; both tables must hold
    the same records (:func:`aligned`) and every column.  ``hint`` ends the error message
    when there is no such column.
    """
    aligned(original, anonymized, metric)
    cols = params["columns"] or [a.name for a in original.typing.attributes
                                 if a.role == "quasi" and a.type == "continuous"]
    if not cols:
        raise InputError(f"{metric} needs numeric columns: no continuous quasi-identifier is typed{hint}")
    for c in cols:
        if c not in original.columns or c not in anonymized.columns:
            raise InputError(f"{metric}: column {c!r} is not in both tables")
    return cols


#: what a numeric metric given generalized labels suggests (see :func:`numeric_values`)
GENERALIZED_HINT = ("use a metric that reads generalized values (loss, generalization-rl, relative-loss, "
                    "reconstruction-distance with form: generalized), or leave {column!r} out of its columns:")
#: ... and given text in a column not marked generalized
TEXT_HINT = ("{column!r} is not numeric: name only numeric columns in its columns: (and type a column continuous "
             "only if it holds numbers); if its text is generalized values, use a metric that reads them (loss, "
             "generalization-rl, relative-loss)")


def numeric_values(table: TypedTable, columns: list[str], metric: str) -> np.ndarray:
    """The named columns as an ``(n, d)`` float64 array, through
    :func:`anonflow.generalization.numeric_column`: a column holding generalized labels (a
    ``lattice`` or ``l-clustering`` output) fails in one line that says which metric needs
    numbers and what to use instead."""
    out = np.empty((table.num_rows, len(columns)), dtype=np.float64)
    for j, name in enumerate(columns):
        hint = GENERALIZED_HINT if generalization(table, name) else TEXT_HINT
        out[:, j] = numeric_column(table, name, metric=metric, hint=hint)
    return out


class SseIl(Metric):
    name = "sse-il"
    version = __version__
    description = "Information loss IL = 100 * SSE / SST on z-scored numeric QIs (SPEC section 8)."
    category = "utility"
    params = (
        Param("columns", "list", items="str", default=None, nullable=True,
              help="numeric columns to measure (default: the continuous quasi-identifiers)"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        cols = numeric_columns(original, anonymized, params, self.name)
        Xo = numeric_values(original, cols, self.name)
        Xa = numeric_values(anonymized, cols, self.name)
        Zo, _ = zscores(Xo, cols)
        std = Xo.std(axis=0)
        std = np.where(std == 0, 1.0, std)
        sst = float(np.sum(Zo * Zo))
        diff = (Xo - Xa) / std
        sse = float(np.sum(diff * diff))
        return {"sse-il": 100.0 * sse / sst if sst > 0 else 0.0, "sse-il.sse": sse, "sse-il.sst": sst}


class KAnonymity(Metric):
    name = "k-anonymity"
    version = __version__
    description = ("Smallest equivalence class over the published QI values (or, by: class, over class ids, "
                   "with the QI values' figure beside it as .by_qi_values), computed in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (
        Param("k", "int", default=None, min=1, nullable=True,
              help="required class size (default: the k the algorithm claims)"),
        Param("by", "str", default=None, nullable=True, choices=("values", "class"),
              help="classes are records sharing published QI values (default), or sharing _class "
                   "(lossy-join output publishes exact QIs with a class id; its claim says so)"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        quasi = anonymized.typing.quasi
        if not quasi:
            raise InputError("k-anonymity needs quasi-identifiers in the typing of its input")
        claim = anonymized.claims.get("k-anonymity", {})
        k = params["k"] if params["k"] is not None else claim.get("k")
        by = params["by"] or claim.get("by", "values")
        if by == "class":
            if CLASS not in anonymized.columns:
                raise InputError("k-anonymity by class needs the _class column of an algorithm's output")
            published, group = anonymized, sql_ident(CLASS)
        else:
            published, group = anonymized, ", ".join(sql_ident(c) for c in quasi)
        row = ctx.sql(
            f"WITH classes AS (SELECT count(*) AS n FROM published GROUP BY {group}) "
            "SELECT min(n), count(*), count(*) FILTER (WHERE n < ?) FROM classes",
            [k or 0], published=published).to_pylist()[0]
        smallest, classes, violating = row.values()
        out = {"k-anonymity": float(smallest or 0), "k-anonymity.classes": float(classes)}
        if by == "class":
            # counted by class id, k is a claim about the class structure (what a lossy join
            # guarantees), not about what an attacker sees: report the QI values' k beside it
            values = anonymized
            vk = ctx.sql(f"SELECT min(n) AS k FROM (SELECT count(*) AS n FROM published GROUP BY "
                         f"{', '.join(sql_ident(c) for c in quasi)})", published=values).to_pylist()[0]["k"]
            out["k-anonymity.by_qi_values"] = float(vk or 0)
        if k is not None:
            out.update({"k-anonymity.k": float(k), "k-anonymity.violating_classes": float(violating),
                        "k-anonymity.holds": float(violating == 0)})
        return out

    #: merging classes never shrinks one, so both hold (SPEC section 6).
    monotone = True
    monotone_with_suppression = True

    #: counts through sizes, counts(), distinct() and codes() only (see Metric)
    weighted_partitions = True

    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        k = params.get("k")
        if k is None:
            raise InputError("k-anonymity needs k, e.g. model_params: {k: 5}")
        return partition.sizes >= k


PLUGINS = [SseIl(), KAnonymity()]
