"""(alpha,k) and sensitivity-graded (alpha_i,k)-anonymity: privacy checks, the sensitivity
distance Ds(T_SA) and the reconstruction distance (SPEC sections 3 and 7, seed 002).

Everything that counts records per class is computed in DuckDB SQL (``ctx.sql``) over one
relation ``counts(cls, value, c, n)``: per class ``cls`` and sensitive value ``value``, the
count ``c``, and the class size ``n``. Two builders give that relation:

* :func:`table_counts_sql` -- a single published table: classes are its ``_class`` ids when
  present, otherwise its distinct quasi-identifier combinations (numbered by
  ``dense_rank`` over the QI values in sort order);
* :func:`pair_counts_sql` -- a lossy-join QI/SA pair (the ``lossy-join`` publisher's two
  tables): counts from the SA table, class sizes from the QI table, joined on the class id.
  A class whose SA counts do not add up to its QI rows (or that exists in one table only)
  is reported as inconsistent.

:func:`alpha_report` runs the (alpha,k) / (alpha_i,k) check on either relation; a later
``verify`` command can call it on published files without going through a workflow.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import CLASS, InputError, Metric, Param, StepContext, TypedTable
from anonflow.grading import Grading, sensitivity_distance
from anonflow.hierarchy import value_keys

from . import __version__
from .common import missing_marker, real_counts
from .metrics import aligned, sql_ident

#: tolerance of the frequency bound c <= alpha * n (alpha is a decimal such as 0.3).
EPS = 1e-9

Sql = Callable[..., pa.Table]


# -- shared helpers --------------------------------------------------------------------


def sensitive_column(table: TypedTable, given: str | None, plugin: str) -> str:
    """The sensitive attribute a plugin works on: ``given``, or the only one typed."""
    sens = table.typing.sensitive
    if given is not None:
        if given not in table.columns:
            raise InputError(f"{plugin}: parameter 'sensitive' = {given!r} is not a column of the table")
        return given
    if len(sens) == 1:
        return sens[0]
    if not sens:
        raise InputError(f"{plugin} needs a sensitive attribute; name it under 'sensitive' in the typing step")
    raise InputError(f"{plugin} works on one sensitive attribute, but the typing names {len(sens)} "
                     f"({', '.join(sens)}); choose one with the parameter 'sensitive'")


def grading_of(table: TypedTable, column: str, plugin: str) -> Grading:
    """The sensitivity grading the typing step attached to ``column``."""
    attr = table.typing.get(column) if column in table.typing else None
    data = attr.options.get("grading") if attr is not None else None
    if not data:
        raise InputError(f"{plugin} needs a sensitivity grading of {column!r}; declare it in the typing step: "
                         f"sensitive: {{{column}: {{grading: path/to/grading.yaml}}}}")
    return Grading.from_json(data)


def typed_input(tables: Mapping[str, Any]) -> TypedTable | None:
    """The table whose typing a metric's ``check`` reads: ``anonymized``, or -- when ``anonflow
    plan`` checks an evaluate step before anything has run -- ``typed``, the table the
    algorithm producing the anonymized input will receive (algorithms keep its typing)."""
    for key in ("anonymized", "typed"):
        if tables.get(key) is not None:
            return tables[key]
    return None


def check_sensitive(tables: Mapping[str, Any], params: Mapping[str, Any], plugin: str, *,
                    graded: bool = False) -> None:
    """A metric's ``check``: the typing names the sensitive attribute it needs (and, with
    ``graded``, that attribute carries a sensitivity grading)."""
    table = typed_input(tables)
    if table is None:
        return
    s = sensitive_column(table, params.get("sensitive"), plugin)
    if graded:
        grading_of(table, s, plugin)


def grading_bounds(grading: Grading) -> pa.Table:
    """``(value, level, alpha)`` of every graded value, for SQL joins."""
    rows = [(v, lv.number, lv.alpha) for lv in grading.levels for v in lv.values]
    return pa.table({"value": pa.array([r[0] for r in rows], pa.string()),
                     "level": pa.array([r[1] for r in rows], pa.int64()),
                     "alpha": pa.array([r[2] for r in rows], pa.float64())})


def counted_part(table: TypedTable) -> tuple[list[str], Any]:
    """``(columns, relation)`` for :func:`table_counts_sql`: a table in the store is read by
    DuckDB where it lies (the SQL leaves suppressed records out itself), not loaded."""
    if not table.loaded and table.stored is not None:
        return list(table.columns), table
    data = published_part(table)
    return data.column_names, data


def published_part(table: TypedTable) -> pa.Table:
    """The records of ``table`` that are in a class (a null ``_class`` means suppressed)."""
    data = table.data
    if CLASS in data.column_names and data.column(CLASS).null_count:
        data = data.filter(pc.is_valid(data.column(CLASS)))
    return data


# -- the counts relation ---------------------------------------------------------------


def table_counts_sql(columns: list[str], quasi: list[str], sensitive: str, name: str = "published") -> str:
    """SQL giving ``(cls, value, c, n)`` for a single published table registered as ``name``.

    Classes are the ``_class`` ids if the table has them, else its distinct QI combinations."""
    s = sql_ident(sensitive)
    if CLASS in columns:
        base = f"SELECT {sql_ident(CLASS)} AS cls, CAST({s} AS VARCHAR) AS value FROM {name} " \
               f"WHERE {sql_ident(CLASS)} IS NOT NULL"
    else:
        if not quasi:
            raise InputError("the table has neither a _class column nor quasi-identifiers to group records by")
        order = ", ".join(sql_ident(q) for q in quasi)
        base = f"SELECT dense_rank() OVER (ORDER BY {order}) - 1 AS cls, CAST({s} AS VARCHAR) AS value FROM {name}"
    return (f"SELECT cls, value, c, sum(c) OVER (PARTITION BY cls) AS n "
            f"FROM (SELECT cls, value, count(*) AS c FROM ({base}) GROUP BY cls, value)")


def pair_counts_sql(class_column: str = "class_id", sensitive: str = "value", count_column: str = "count",
                    qi: str = "qi", sa: str = "sa") -> str:
    """SQL giving ``(cls, value, c, n)`` for a lossy-join pair registered as ``qi`` and ``sa``:
    ``c`` from the SA table's count column, ``n`` = the class's rows in the QI table (null for
    a class missing from the QI table)."""
    cls = sql_ident(class_column)
    return (f"SELECT s.cls, s.value, s.c, q.n FROM "
            f"(SELECT {cls} AS cls, CAST({sql_ident(sensitive)} AS VARCHAR) AS value, "
            f"CAST({sql_ident(count_column)} AS BIGINT) AS c FROM {sa}) s "
            f"LEFT JOIN (SELECT {cls} AS cls, count(*) AS n FROM {qi} GROUP BY {cls}) q ON s.cls = q.cls")


def pair_consistency_sql(class_column: str = "class_id", count_column: str = "count",
                         qi: str = "qi", sa: str = "sa") -> str:
    """SQL counting the classes of a lossy-join pair whose SA counts do not add up to their QI
    rows, or that appear in only one of the two tables (0 for a consistent pair)."""
    cls = sql_ident(class_column)
    return (f"SELECT count(*) AS bad FROM "
            f"(SELECT {cls} AS cls, count(*) AS n FROM {qi} GROUP BY {cls}) q FULL OUTER JOIN "
            f"(SELECT {cls} AS cls, sum({sql_ident(count_column)}) AS n FROM {sa} GROUP BY {cls}) s "
            f"ON q.cls = s.cls WHERE q.n IS DISTINCT FROM s.n")


# -- the (alpha, k) / (alpha_i, k) check ------------------------------------------------


def sql_literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def flagged_counts_sql(counts_sql: str, missing: str | None) -> str:
    """``(cls, value, c, n, miss, r)`` from a ``(cls, value, c, n)`` relation: ``miss`` flags
    the row of the missing-value marker ``missing`` (the typing's ``?`` under ``missing:
    category``; None: no value is missing), ``r`` is the class's records with a real value
    (``n`` less its missing ones)."""
    miss = f"(value IS NOT DISTINCT FROM {sql_literal(missing)})" if missing is not None else "false"
    return (f"SELECT cls, value, c, n, {miss} AS miss, "
            f"n - sum(CASE WHEN {miss} THEN c ELSE 0 END) OVER (PARTITION BY cls) AS r FROM ({counts_sql})")


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


# -- sensitivity distance Ds(T_SA) ------------------------------------------------------


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


# -- reconstruction distance ------------------------------------------------------------


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


PLUGINS = [AlphaKAnonymity(), AlphaIKAnonymity(), SensitivityDistance(), ReconstructionDistance()]

__all__ = ["table_counts_sql", "flagged_counts_sql", "pair_counts_sql", "pair_consistency_sql", "alpha_report", "level_counts",
           "lossy_join_distance", "covered_values", "sensitive_column", "grading_of", "grading_bounds",
           "published_part", "counted_part", "typed_input", "check_sensitive"]
