"""Counting records per class, in DuckDB SQL: what the privacy checks, and the metrics that
count per class, share (SPEC sections 3 and 7).

**Classes.** ``by: class`` groups records by ``_class`` (the algorithm's classes; null =
suppressed, left out), ``by: values`` by the published quasi-identifier values (what an
attacker sees: classes publishing the same values are one); :data:`BY`, :func:`grouping`,
:func:`grouped_part`.

**The counts relation.** Everything that counts records per class is computed over one
relation ``counts(cls, value, c, n)``: per class ``cls`` and sensitive value ``value``, the
count ``c``, and the class size ``n``. Two builders give that relation:

* :func:`table_counts_sql` -- a single published table: classes are its ``_class`` ids when
  present, otherwise its distinct quasi-identifier combinations (numbered by
  ``dense_rank`` over the QI values in sort order);
* :func:`pair_counts_sql` -- a lossy-join QI/SA pair (the ``lossy-join`` publisher's two
  tables): counts from the SA table, class sizes from the QI table, joined on the class id.
  A class whose SA counts do not add up to its QI rows (or that exists in one table only)
  is reported as inconsistent (:func:`pair_consistency_sql`).

:func:`flagged_counts_sql` adds the missing-value flags (``miss``, ``r``), and
:func:`class_counts_sql` builds the flagged relation of a table grouped ``by`` class or values.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import CLASS, ROW, Grading, InputError, Param, TypedTable, sql_ident

from ..common.columns import missing_marker

Sql = Callable[..., pa.Table]


# -- classes ------------------------------------------------------------------------------


BY = Param("by", "str", default=None, nullable=True, choices=("class", "values"),
           help="classes: records sharing _class (default when present) or sharing the published QI values")
SENSITIVE = Param("sensitive", "str", default=None, nullable=True,
                  help="the sensitive attribute (default: the only one typed)")


def grouping(table: TypedTable, params: Mapping[str, Any], metric: str) -> str:
    """How ``metric`` groups the records of ``table`` into classes: its parameter ``by`` (see
    :data:`BY`), by default ``class`` when the table has ``_class``, else ``values``."""
    by = params.get("by") or ("class" if CLASS in table.columns else "values")
    if by == "class" and CLASS not in table.columns:
        raise InputError(f"{metric} by class needs the _class column of an algorithm's output")
    if by == "values" and not table.typing.quasi:
        raise InputError(f"{metric} by values needs quasi-identifiers in the typing of its input")
    return by


def class_counts_sql(table: TypedTable, data: pa.Table, sensitive: str, by: str) -> str:
    """``(cls, value, c, n, miss, r)`` per class and sensitive value of ``data`` (the
    :func:`grouped_part` of ``table``) grouped ``by`` (see :func:`table_counts_sql` and
    :func:`flagged_counts_sql`): ``miss`` flags the typing's missing-value marker, ``r`` is
    the class's records with a real value."""
    columns = data.column_names if by == "class" else [c for c in data.column_names if c != CLASS]
    return flagged_counts_sql(table_counts_sql(columns, table.typing.quasi, sensitive), missing_marker(table))


def grouped_part(table: TypedTable, by: str) -> pa.Table:
    """The records of ``table`` in a class (:func:`published_part`), without ``_row`` and
    ``_class`` when classes are the published QI values."""
    data = published_part(table)
    return data if by == "class" else data.drop_columns([c for c in (ROW, CLASS) if c in data.column_names])


def claimed(table: TypedTable, key: str) -> Any:
    """A parameter from the algorithm's claims: ``k`` from k-anonymity or p-sensitive
    k-anonymity, ``p`` from p-sensitive k-anonymity, ``l`` from l-diversity (else p)."""
    claims = table.claims
    if key == "k":
        return claims.get("k-anonymity", {}).get("k", claims.get("p-sensitive-k-anonymity", {}).get("k"))
    if key == "p":
        return claims.get("p-sensitive-k-anonymity", {}).get("p")
    return claims.get("l-diversity", {}).get("l", claims.get("p-sensitive-k-anonymity", {}).get("p"))


# -- the counts relation ------------------------------------------------------------------


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
