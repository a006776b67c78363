"""(alpha,k) and sensitivity-graded (alpha_i,k)-anonymity: privacy checks (SPEC section 3,
seed 002).

:func:`alpha_report` runs the (alpha,k) / (alpha_i,k) check in DuckDB SQL on either counts
relation of :mod:`.counts` (a published table, or a lossy-join QI/SA pair); ``anonflow
verify`` calls it on published files without going through a workflow.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import Grading, InputError, Metric, Param, StepContext, TypedTable

from .. import __version__
from ..common.columns import EPS, check_sensitive, grading_of, missing_marker, real_counts, sensitive_column
from ..common.counts import Sql, counted_part, flagged_counts_sql, grading_bounds, table_counts_sql
from ..common.wildcard import refuse_null_qis


def alpha_report(sql: Sql, counts_sql: str, tables: Mapping[str, Any], *, k: int | None,
                 alpha: float | None = None, grading: Grading | None = None, per: str = "value",
                 missing: str | None = None) -> dict[str, Any]:
    """Check (alpha,k) (give ``alpha``) or (alpha_i,k) (give ``grading``) over the relation
    ``counts_sql`` (see :func:`table_counts_sql`, :func:`pair_counts_sql`), in DuckDB SQL.

    ``per: value`` bounds each value's count by its level's alpha; ``per: level`` bounds the
    count of all values of a level together. ``missing`` is the value that stands for a
    missing sensitive value (None: none): it is no value of its own and never graded; a real
    value's frequency is its count over the class's records with a real value, c / r (r = |E|
    less the missing ones, so never lower than c / |E|), and a class none of whose records has
    a real value violates the model. Returns: ``classes``, ``smallest`` (class size),
    ``violating`` (classes with fewer than k records, no real value, or a count above its
    bound), ``missing`` (records with a missing value), ``no_value`` (classes without a real
    value), and the worst (class, value or level): ``worst_class``, ``worst_key``,
    ``worst_level``, ``worst_ratio`` = c/r, ``worst_alpha`` and ``worst_relative`` = c / (alpha
    r), the largest over all (class, value) pairs (ties: lowest class, then key)."""
    if (alpha is None) == (grading is None):
        raise ValueError("give exactly one of alpha and grading")
    if per not in ("value", "level"):
        raise ValueError(f"per must be 'value' or 'level', not {per!r}")
    tables = dict(tables)
    if grading is not None:
        tables["_bounds"] = grading_bounds(grading)
        joined = ("SELECT c.cls, c.n, c.r, c.c, c.value, b.level, b.alpha FROM counts c "
                  "LEFT JOIN _bounds b ON c.value = b.value WHERE NOT c.miss")
    else:
        joined = (f"SELECT cls, n, r, c, value, 1 AS level, CAST({float(alpha)!r} AS DOUBLE) AS alpha FROM counts "
                  "WHERE NOT miss")
    if per == "level":
        keyed = ("SELECT cls, any_value(n) AS n, any_value(r) AS r, sum(c) AS c, CAST(level AS VARCHAR) AS key, "
                 "level, any_value(alpha) AS alpha FROM joined GROUP BY cls, level")
    else:
        keyed = "SELECT cls, n, r, c, value AS key, level, alpha FROM joined"
    query = f"""
        WITH counts AS ({flagged_counts_sql(counts_sql, missing)}), joined AS ({joined}), keyed AS ({keyed}),
        scored AS (SELECT *, c / r AS ratio, c / (r * alpha) AS rel, (c > alpha * r + {EPS}) AS bad FROM keyed),
        classes AS (SELECT cls, any_value(n) AS n, any_value(r) AS r FROM counts GROUP BY cls),
        badcls AS (SELECT cls FROM classes WHERE n < ? OR r = 0 UNION SELECT cls FROM scored WHERE bad)
        SELECT (SELECT count(*) FROM classes) AS classes,
               (SELECT count(*) FROM badcls) AS violating,
               (SELECT min(n) FROM classes) AS smallest,
               (SELECT coalesce(sum(c), 0) FROM counts WHERE miss) AS missing,
               (SELECT count(*) FROM classes WHERE r = 0) AS no_value,
               (SELECT count(*) FROM scored WHERE alpha IS NULL) AS ungraded,
               (SELECT any_value(key) FROM scored WHERE alpha IS NULL) AS ungraded_value,
               (SELECT count(*) FROM counts WHERE n IS NULL) AS sizeless,
               w.cls AS worst_class, w.key AS worst_key, w.level AS worst_level, w.ratio AS worst_ratio,
               w.alpha AS worst_alpha, w.rel AS worst_relative
        FROM (SELECT 1) dummy LEFT JOIN
             (SELECT * FROM scored WHERE alpha IS NOT NULL AND n IS NOT NULL
              ORDER BY rel DESC, cls, key LIMIT 1) w ON true
    """
    row = sql(query, [int(k or 0)], **tables).to_pylist()[0]
    if row["ungraded"]:
        raise InputError(f"the sensitive value {row['ungraded_value']!r} has no level in the grading "
                         f"({row['ungraded']} (class, value) pair(s) without a bound)")
    if row["sizeless"]:
        raise InputError(f"{row['sizeless']} (class, value) count(s) of the SA table belong to classes that "
                         "are not in the QI table")
    return row


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


class _AlphaCheck(Metric):
    category = "privacy"
    requires_original = False

    def check(self, params: Mapping[str, Any], **tables: Any) -> None:
        check_sensitive(tables, params, self.name, graded=self.name == "alpha-i-k-anonymity")

    def _resolve(self, anonymized: TypedTable, params: Mapping[str, Any]) -> tuple[str, int | None]:
        s = sensitive_column(anonymized, params.get("sensitive"), self.name)
        claim = anonymized.claims.get(self.name, {})
        k = params["k"] if params["k"] is not None else claim.get("k")
        return s, k

    def _values(self, row: Mapping[str, Any], k: int | None, extra: dict[str, float]) -> dict[str, float]:
        n = self.name
        out = {n: _number(row["worst_relative" if n == "alpha-i-k-anonymity" else "worst_ratio"] or 0.0),
               f"{n}.worst_ratio": _number(row["worst_ratio"] or 0.0),
               f"{n}.worst_class": _number(row["worst_class"]),
               f"{n}.classes": float(row["classes"] or 0),
               f"{n}.smallest_class": float(row["smallest"] or 0),
               f"{n}.violating_classes": float(row["violating"] or 0),
               f"{n}.k": float(k or 1), **extra}
        if row["missing"]:
            out[f"{n}.missing_sensitive"] = float(row["missing"])
            out[f"{n}.classes_without_value"] = float(row["no_value"] or 0)
        out[f"{n}.holds"] = float(not row["violating"])
        return out

    def _missing_note(self, ctx: StepContext, row: Mapping[str, Any], s: str) -> None:
        if row["missing"]:
            ctx.note(f"{self.name}: {row['missing']} record(s) have a missing {s} value; it is no value of its own: "
                     "frequencies count over the records with a real value"
                     + (f", and {row['no_value']} class(es) without one violate the model" if row["no_value"] else ""))


class AlphaKAnonymity(_AlphaCheck):
    name = "alpha-k-anonymity"
    version = __version__
    description = ("(alpha,k)-anonymity (SPEC section 3): every class has >= k records and every sensitive value "
                   "at most alpha of them; DuckDB SQL over (class, value) counts.")
    params = (
        Param("alpha", "float", default=None, nullable=True, above=0.0, max=1.0,
              help="frequency bound (default: the alpha the algorithm claims)"),
        Param("k", "int", default=None, nullable=True, min=1, help="class size (default: the claimed k, else 1)"),
        Param("sensitive", "str", default=None, nullable=True,
              help="the sensitive attribute (default: the only one typed)"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        refuse_null_qis(ctx, anonymized, self.name)
        s, k = self._resolve(anonymized, params)
        alpha = params["alpha"] if params["alpha"] is not None else anonymized.claims.get(self.name, {}).get("alpha")
        if alpha is None:
            raise InputError("alpha-k-anonymity needs 'alpha' (no algorithm claims one for this table)")
        if not 0 < alpha <= 1:
            raise InputError(f"parameter 'alpha' must be in (0, 1], got {alpha!r}")
        columns, data = counted_part(anonymized)
        row = alpha_report(ctx.sql, table_counts_sql(columns, anonymized.typing.quasi, s),
                           {"published": data}, k=k, alpha=alpha, missing=missing_marker(anonymized))
        self._missing_note(ctx, row, s)
        if row["worst_key"] is not None and row["violating"]:
            ctx.note(f"alpha-k-anonymity: worst class {row['worst_class']} has {row['worst_ratio']:.4g} of its "
                     f"records with {s} = {row['worst_key']!r} (alpha {alpha:g})")
        return self._values(row, k, {f"{self.name}.alpha": float(alpha)})

    #: merging classes that each keep every value within alpha keeps it within alpha; a class
    #: merely containing a satisfying class may not (so no pruning with suppression).
    monotone = True
    monotone_with_suppression = False

    #: counts through sizes, counts(), distinct() and codes() only (see Metric)
    weighted_partitions = True

    def partition_holds(self, partition: Any, params: Mapping[str, Any]) -> np.ndarray:
        """Each class of a lattice node: >= k records and every value at most alpha of them."""
        alpha = params.get("alpha")
        if alpha is None:
            raise InputError("alpha-k-anonymity needs alpha, e.g. model_params: {alpha: 0.5, k: 4}")
        if not 0 < alpha <= 1:
            raise InputError(f"parameter 'alpha' must be in (0, 1], got {alpha!r}")
        s = sensitive_column(partition.table, params.get("sensitive"), self.name)
        sizes = np.asarray(partition.sizes)
        counts, real, _ = real_counts(partition, s)  # a missing value is no value: c / r, r > 0
        return (sizes >= (params.get("k") or 1)) & (real > 0) & np.all(counts <= alpha * real[:, None] + EPS, axis=1)


class AlphaIKAnonymity(_AlphaCheck):
    name = "alpha-i-k-anonymity"
    version = __version__
    description = ("Sensitivity-graded (alpha_i,k)-anonymity (SPEC section 3): >= k records per class and each "
                   "value of level i at most alpha_i of them (per: level bounds a level's values together).")
    params = (
        Param("k", "int", default=None, nullable=True, min=1, help="class size (default: the claimed k, else 1)"),
        Param("per", "str", default=None, nullable=True, choices=("value", "level"),
              help="bound each value (value) or each level's values together (level); default: the claim, "
                   "else value"),
        Param("sensitive", "str", default=None, nullable=True,
              help="the sensitive attribute (default: the only one typed); it must carry a grading"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        refuse_null_qis(ctx, anonymized, self.name)
        s, k = self._resolve(anonymized, params)
        grading = grading_of(anonymized, s, self.name)
        per = params["per"] or anonymized.claims.get(self.name, {}).get("per") or "value"
        columns, data = counted_part(anonymized)
        row = alpha_report(ctx.sql, table_counts_sql(columns, anonymized.typing.quasi, s),
                           {"published": data}, k=k, grading=grading, per=per, missing=missing_marker(anonymized))
        self._missing_note(ctx, row, s)
        if row["worst_key"] is not None and row["violating"]:
            what = f"level {row['worst_key']}" if per == "level" else f"{s} = {row['worst_key']!r}"
            ctx.note(f"alpha-i-k-anonymity: worst class {row['worst_class']} has {row['worst_ratio']:.4g} of its "
                     f"records with {what} (alpha {row['worst_alpha']:g})")
        return self._values(row, k, {f"{self.name}.worst_alpha": _number(row["worst_alpha"]),
                                     f"{self.name}.worst_level": _number(row["worst_level"]),
                                     f"{self.name}.per_level": float(per == "level")})

    monotone = True
    monotone_with_suppression = False

    #: counts through sizes, counts(), distinct() and codes() only (see Metric)
    weighted_partitions = True

    def partition_holds(self, partition: Any, params: Mapping[str, Any]) -> np.ndarray:
        """Each class of a lattice node: >= k records and each value (per: level, each level's
        values together) at most alpha_i of them."""
        s = sensitive_column(partition.table, params.get("sensitive"), self.name)
        grading = grading_of(partition.table, s, self.name)
        counts, real, values = real_counts(partition, s)  # a missing value is no value: c / r, r > 0
        levels = grading.levels_of(pa.array(values, pa.string()))
        if (levels == 0).any():
            raise InputError(f"the grading of {s!r} leaves the value {values[int(np.flatnonzero(levels == 0)[0])]!r} "
                             "unassigned")
        sizes = np.asarray(partition.sizes)
        alphas = grading.alphas()
        if (params.get("per") or "value") == "level":
            onehot = (levels[:, None] == np.arange(grading.size + 1)[None, :]).astype(np.int64)
            counts, bound = counts @ onehot, alphas
            counts, bound = counts[:, 1:], bound[1:]
        else:
            bound = alphas[levels]
        return (sizes >= (params.get("k") or 1)) & (real > 0) & np.all(
            counts <= bound[None, :] * real[:, None] + EPS, axis=1)


PLUGINS = [AlphaKAnonymity(), AlphaIKAnonymity()]
