"""Counting classes with suppressed cells as wildcards (sdcMicro's convention).

**The convention.** A suppressed quasi-identifier cell is published as null (see
``anonflow/generalization.py``) and, when classes are counted, it *matches any value*: two
records are **compatible** when they agree on every quasi-identifier where both are non-null.
A record's **compatible count** is the number of records compatible with it, **itself
included**; the smallest compatible count over the table is the k it achieves (with no null
cell this is the size of the record's class, and the smallest one the usual k-anonymity).

This is sdcMicro's sample frequency ``fk`` with missing values (``R/freqCalc.r``,
``freqCalc(x, keyVars, alpha = 1)``): "a missing value stands for any of the possible
categories of the variable considered". Its test ``tests/testthat/test_freqCalc.R`` ("numeric
values with missing values (non-weighted)") gives the keys (2,3,1) (3,3,3) (2,3,NA) (2,3,2)
(3,3,1) (3,3,1) (1,4,NA) (2,3,1) the counts 3 1 4 2 2 2 1 3: the record (2,3,1) counts itself,
(2,3,NA) and the other (2,3,1); the record (2,3,NA) counts itself and the three records
(2,3,*). A record whose quasi-identifiers are all null matches every record (``fk = n``), as
in ``freqCalc``. Compatibility is not transitive, so compatible counts are not class sizes:
(1,NA) and (2,NA) are both compatible with (NA,5) but not with each other.

**How it is computed** (:func:`compatible_counts`, :func:`min_compatible_count`, in DuckDB
SQL). The records are grouped by their *null pattern* (the set of quasi-identifiers that are
non-null, a bit mask) and their values on it: the distinct keys, each with its number of
records. A key ``d`` of pattern ``Q`` is compatible with a key ``r`` of pattern ``P`` when they
agree on ``S = P & Q``, the quasi-identifiers non-null in both. So every key ``d`` is projected,
for each pattern ``P`` present, onto ``S = P & Q`` (the other columns null), and the projections
are summed by ``(P, S, values)``; every key ``r`` of pattern ``P`` is projected onto each ``S``
that occurs with ``P`` and adds up the sums it meets -- one hash join (``IS NOT DISTINCT FROM``)
over at most ``keys x patterns`` rows, whatever the number of patterns, and no pair of records
is ever compared. The counts are joined back to the records by their values. Real tables have
few patterns (no null at all: one pattern, a plain ``GROUP BY``); the worst case is every subset
of the ``m`` quasi-identifiers, ``2**m`` patterns, ``3**m`` pairs ``(P, S)``. More than
:data:`MAX_PATTERNS` patterns (256, all those of 8 QIs) raise :class:`~anonflow.api.RunError`
naming the count.

:func:`compatible_counts_codes` is the same grouping in numpy on integer codes (the
``local-suppression`` algorithm counts candidate suppressions with it, on distinct keys), and
:func:`compatible_counts_reference` the O(n^2) definition, for tests.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import CLASS, InputError, RunError, TypedTable, sql_ident

__all__ = ["MAX_PATTERNS", "COUNT", "WEIGHT", "null_records", "refuse_nulls", "refuse_null_qis", "key_counts", "pattern_sql", "compatible_counts", "min_compatible_count",
           "compatible_counts_query", "compatible_counts_codes", "compatible_min_codes", "compatible_counts_reference", "encode_codes"]

#: the most null patterns a count accepts: every pattern of 8 quasi-identifiers (2**8), so up to
#: 8 QIs are always counted. The SQL count projects each distinct key once per pattern (at most
#: keys x patterns rows); the numpy count loops over the pattern pairs (at most 3**8 = 6561).
MAX_PATTERNS = 256
#: the name of the compatible count column :func:`compatible_counts` returns
COUNT = "_af_compatible"
#: the compatible sum of a weight column (:func:`compatible_counts_query` with ``weight``)
WEIGHT = "_af_weight"


def _mask_bits(m: int) -> None:
    if m > 62:
        raise InputError(f"wildcard counting takes at most 62 quasi-identifiers, not {m}")


def pattern_sql(columns: Sequence[str], prefix: str = "") -> str:
    """SQL for the null pattern of a record: bit ``i`` set when ``columns[i]`` is non-null (BIGINT)."""
    _mask_bits(len(columns))
    if not columns:
        return "0::BIGINT"
    return " + ".join(f"(CASE WHEN {prefix}{sql_ident(c)} IS NULL THEN 0 ELSE {1 << i} END)::BIGINT"
                      for i, c in enumerate(columns))


def _joins(patterns: Sequence[int], data_patterns: Sequence[int] | None = None) -> dict[int, list[int]]:
    """For each query pattern P, the distinct ``S = P & Q`` over the data patterns Q, sorted."""
    data = sorted(set(data_patterns if data_patterns is not None else patterns))
    return {p: sorted({p & q for q in data}) for p in sorted(set(patterns))}


def _guard(joins: dict[int, list[int]], m: int, limit: int | None = None) -> None:
    """Refuse more than ``limit`` (default :data:`MAX_PATTERNS`) null patterns."""
    limit = MAX_PATTERNS if limit is None else limit
    if len(joins) > limit:
        total = sum(len(v) for v in joins.values())
        raise RunError(f"wildcard counting: the quasi-identifiers' null cells form {len(joins)} distinct patterns "
                       f"({total} pattern pairs to join), more than the {limit} allowed (over {m} quasi-identifiers "
                       f"there can be 2**{m}); count fewer quasi-identifiers, or suppress cells in fewer patterns")


def _bits(mask: int, m: int) -> list[int]:
    return [i for i in range(m) if mask >> i & 1]


def compatible_counts_query(columns: Sequence[str], patterns: Sequence[int], source: str = "t",
                            weight: str | None = None) -> str:
    """A query over the table ``source`` yielding one row per distinct key: its values of
    ``columns`` (as ``_af_q0``, ``_af_q1``, ...), its null pattern ``_af_pat``, its number of
    records ``_af_n`` and its compatible count ``_af_compatible``. ``patterns``: the null patterns
    present in ``source`` (:func:`pattern_sql`), which shape the query.

    One pass of hash joins whatever the number of patterns: every key ``d`` is projected, for
    each pattern ``P`` present, onto ``S = P & pattern(d)`` (the other columns null) and the
    projections are summed by ``(P, S, values)``; every key ``r`` of pattern ``P`` is projected
    onto each ``S`` that occurs for ``P`` and looks its sums up (``IS NOT DISTINCT FROM``).

    ``weight``: a numeric column; the key then also gets ``_af_weight``, the sum of ``weight``
    over its compatible records (sdcMicro's ``Fk`` with ``freqCalc(..., w = weight)``)."""
    m = len(columns)
    joins = _joins(patterns)
    _guard(joins, m)
    q = [f"_af_q{i}" for i in range(m)]
    sel = ", ".join(f"{sql_ident(c)} AS {q[i]}" for i, c in enumerate(columns))
    pp = ", ".join(f"({p})" for p in joins)
    ps = ", ".join(f"({p}, {s})" for p, subsets in joins.items() for s in subsets)
    proj_d = ", ".join(f"CASE WHEN (k._af_pat & pp.p & {1 << i}) <> 0 THEN k.{c} END AS _af_m{i}" for i, c in enumerate(q))
    proj_q = ", ".join(f"CASE WHEN (ps.s & {1 << i}) <> 0 THEN k.{c} END AS _af_m{i}" for i, c in enumerate(q))
    on = " AND ".join(["a.p = x.p", "a.s = x.s"] + [f"a._af_m{i} IS NOT DISTINCT FROM x._af_m{i}" for i in range(m)])
    keys = ", ".join(f"k.{c}" for c in q)
    wk = wa = wc = wo = ""
    if weight is not None:
        wk = f", sum(CAST({sql_ident(weight)} AS DOUBLE)) AS _af_w"
        wa = ", sum(k._af_w) AS _af_w"
        wc = f", sum(a._af_w) AS {WEIGHT}"
        wo = f", c.{WEIGHT}"
    return (
        f"WITH k AS MATERIALIZED (SELECT row_number() OVER () AS _af_kid, * FROM (SELECT {sel + ', ' if sel else ''}"
        f"{pattern_sql(columns)} AS _af_pat, count(*)::BIGINT AS _af_n{wk} FROM {source} GROUP BY ALL)), "
        f"pp(p) AS (VALUES {pp}), ps(p, s) AS (VALUES {ps}), "
        f"a AS (SELECT pp.p, (k._af_pat & pp.p) AS s{', ' + proj_d if proj_d else ''}, sum(k._af_n)::BIGINT AS _af_n{wa} "
        f"FROM k, pp GROUP BY ALL), "
        f"x AS (SELECT k._af_kid, ps.p, ps.s{', ' + proj_q if proj_q else ''} FROM k JOIN ps ON k._af_pat = ps.p), "
        f"c AS (SELECT x._af_kid, sum(a._af_n)::BIGINT AS {COUNT}{wc} FROM x JOIN a ON {on} GROUP BY x._af_kid) "
        f"SELECT {keys + ', ' if keys else ''}k._af_pat, k._af_n, c.{COUNT}{wo} FROM k JOIN c USING (_af_kid)")


def _patterns(ctx: Any, table: Any, columns: Sequence[str]) -> list[int]:
    rows = ctx.sql(f"SELECT DISTINCT {pattern_sql(columns)} AS p FROM t ORDER BY p", t=table)
    return [int(v) for v in rows.column("p").to_pylist()]


def _check_columns(table: Any, columns: Sequence[str]) -> list[str]:
    cols = list(columns)
    have = table.columns if isinstance(table, TypedTable) else table.column_names
    missing = [c for c in cols if c not in have]
    if missing:
        raise InputError(f"wildcard counting: column(s) {', '.join(map(repr, missing))} not in the table")
    return cols


def compatible_counts(ctx: Any, table: TypedTable | pa.Table, columns: Sequence[str], *,
                      row: str = "_row") -> pa.Table:
    """Each record's compatible count over ``columns`` (nulls are wildcards): an Arrow table
    ``(row, _af_compatible)`` sorted by ``row`` (BIGINT counts, the record itself included).
    ``ctx`` needs ``sql``; ``table`` is a stored or in-memory :class:`TypedTable` or an Arrow
    table with the column ``row``."""
    cols = _check_columns(table, columns)
    patterns = _patterns(ctx, table, cols)
    if not patterns:
        return pa.table({row: pa.array([], pa.int64()), COUNT: pa.array([], pa.int64())})
    on = " AND ".join(f"t.{sql_ident(c)} IS NOT DISTINCT FROM g._af_q{i}" for i, c in enumerate(cols)) or "TRUE"
    query = (f"WITH g AS ({compatible_counts_query(cols, patterns)}) "
             f"SELECT t.{sql_ident(row)} AS {sql_ident(row)}, g.{COUNT} FROM t JOIN g ON {on} "
             f"ORDER BY t.{sql_ident(row)}")
    return ctx.sql(query, t=table)


def min_compatible_count(ctx: Any, table: TypedTable | pa.Table, columns: Sequence[str]) -> dict[str, int]:
    """The smallest compatible count (the k the table achieves when nulls are wildcards),
    with ``keys`` (distinct keys incl. nulls), ``patterns`` (null patterns) and ``records``;
    ``k = 0`` for an empty table. Counted on the distinct keys; nothing per record leaves DuckDB."""
    cols = _check_columns(table, columns)
    patterns = _patterns(ctx, table, cols)
    if not patterns:
        return {"k": 0, "keys": 0, "patterns": 0, "records": 0}
    row = ctx.sql(f"WITH g AS ({compatible_counts_query(cols, patterns)}) SELECT min({COUNT})::BIGINT AS k, "
                  "count(*)::BIGINT AS keys, sum(_af_n)::BIGINT AS records FROM g", t=table).to_pylist()[0]
    return {"k": int(row["k"]), "keys": int(row["keys"]), "patterns": len(patterns), "records": int(row["records"])}


# -- what the privacy checks and risk measures share --------------------------------------------


def _published(table: TypedTable | pa.Table) -> str:
    """The records of ``t`` in a class: a null ``_class`` (a suppressed record) is left out."""
    have = table.columns if isinstance(table, TypedTable) else table.column_names
    return f"(SELECT * FROM t WHERE {sql_ident(CLASS)} IS NOT NULL)" if CLASS in have else "t"


def null_records(ctx: Any, table: TypedTable | pa.Table, columns: Sequence[str]) -> int:
    """How many published records (a null ``_class`` left out) have a null in ``columns``: 0
    means no wildcard, and every class count is the plain ``GROUP BY`` one."""
    cols = _check_columns(table, columns)
    if not cols:
        return 0
    cond = " OR ".join(f"{sql_ident(c)} IS NULL" for c in cols)
    row = ctx.sql(f"SELECT count(*) FILTER (WHERE {cond})::BIGINT AS n FROM {_published(table)}", t=table)
    return int(row.column("n")[0].as_py() or 0)


def refuse_nulls(ctx: Any, table: TypedTable | pa.Table, columns: Sequence[str], metric: str,
                 advice: str = "") -> None:
    """Raise :class:`~anonflow.api.InputError` in one line when published records of ``table``
    hold a null (a suppressed cell, a wildcard) in ``columns``: for ``metric`` a wildcard has no
    well-defined meaning (its "classes" would overlap, not partition the records), and counting
    the null as a value of its own would claim more than holds."""
    n = null_records(ctx, table, columns)
    if n:
        raise InputError(
            f"{metric}: {n} published record(s) have a suppressed (null) quasi-identifier cell, which matches any "
            f"value (docs/algorithms.md, 'Suppressed cells as wildcards'), and {metric} is not defined for "
            "overlapping classes; "
            + (advice or "evaluate it on a table without suppressed cells (generalize or suppress records instead "
                         "of local-suppression), or measure this table with k-anonymity, average-risk, "
                         "highest-risk, reidentification-risk, sample-uniqueness or individual-risk, which count "
                         "suppressed cells as wildcards"))


def refuse_null_qis(ctx: Any, table: TypedTable, metric: str, advice: str = "") -> None:
    """:func:`refuse_nulls` over the typing's quasi-identifiers that ``table`` publishes."""
    refuse_nulls(ctx, table, [q for q in table.typing.quasi if q in table.columns], metric, advice)


def key_counts(ctx: Any, table: TypedTable | pa.Table, columns: Sequence[str],
               weight: str | None = None) -> pa.Table:
    """One row per distinct published key (a null ``_class`` left out): ``_af_n`` its records,
    ``_af_compatible`` its compatible count (nulls are wildcards) and, with ``weight``,
    ``_af_weight`` the sum of ``weight`` over its compatible records. Sorted by count (then
    records), so sums over it do not depend on DuckDB's grouping order."""
    cols = _check_columns(table, columns)
    src = _published(table)
    patterns = [int(v) for v in ctx.sql(f"SELECT DISTINCT {pattern_sql(cols)} AS p FROM {src} ORDER BY p",
                                        t=table).column("p").to_pylist()]
    names = ["_af_n", COUNT] + ([WEIGHT] if weight is not None else [])
    if not patterns:
        return pa.table({c: pa.array([], pa.float64() if c == WEIGHT else pa.int64()) for c in names})
    order = ", ".join([COUNT, "_af_n"] + ([WEIGHT] if weight is not None else []))
    return ctx.sql(f"WITH g AS ({compatible_counts_query(cols, patterns, src, weight)}) "
                   f"SELECT {', '.join(names)} FROM g ORDER BY {order}", t=table)


# -- numpy, on integer codes ----------------------------------------------------------------


def encode_codes(columns: Sequence[pa.Array | pa.ChunkedArray | Sequence[Any]]) -> np.ndarray:
    """``(n, m)`` int64 codes of the columns (each column's distinct non-null values in sort
    order, 0, 1, ...; null is -1)."""
    out = []
    for col in columns:
        arr = col if isinstance(col, (pa.Array, pa.ChunkedArray)) else pa.array(col)
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        values = pc.unique(arr.drop_null()).sort()
        idx = pc.index_in(arr, value_set=values)
        out.append(np.asarray(pc.fill_null(idx, -1).to_numpy(zero_copy_only=False), dtype=np.int64))
    n = len(out[0]) if out else 0
    return np.stack(out, axis=1) if out else np.zeros((n, 0), dtype=np.int64)


def _patterns_of(codes: np.ndarray) -> np.ndarray:
    m = codes.shape[1]
    _mask_bits(m)
    weights = (np.int64(1) << np.arange(m, dtype=np.int64))
    return ((codes >= 0).astype(np.int64) * weights).sum(axis=1)


def _group_ids(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Common integer ids of the rows of ``a`` and ``b`` (same columns, codes >= 0)."""
    both = np.concatenate([a, b], axis=0)
    if both.shape[1] == 0:
        return np.zeros(len(a), np.int64), np.zeros(len(b), np.int64), 1
    hi = both.max(axis=0) + 1
    if np.sum(np.log2(np.maximum(hi, 2).astype(np.float64))) < 62:  # mixed radix fits an int64
        key = np.zeros(len(both), dtype=np.int64)
        for j in range(both.shape[1]):
            key = key * int(hi[j]) + both[:, j]
        uniq, inv = np.unique(key, return_inverse=True)
    else:
        uniq, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    return inv[:len(a)], inv[len(a):], len(uniq)


def compatible_counts_codes(codes: np.ndarray, weights: np.ndarray | None = None,
                            query: np.ndarray | None = None, *, max_patterns: int = MAX_PATTERNS) -> np.ndarray:
    """Compatible counts on integer codes (``-1`` is a null, a wildcard), grouped by null
    pattern as :func:`compatible_counts` does in SQL: for each row of ``query`` (default: the
    rows of ``codes``) the summed ``weights`` (default 1) of the rows of ``codes`` compatible
    with it. With ``query`` omitted each row counts itself. float64 when weights are floats,
    else int64."""
    codes = np.asarray(codes, dtype=np.int64)
    n = codes.shape[0]
    w = np.ones(n, dtype=np.int64) if weights is None else np.asarray(weights)
    qry = codes if query is None else np.asarray(query, dtype=np.int64)
    out = np.zeros(len(qry), dtype=w.dtype)
    if len(qry) == 0 or n == 0:
        return out
    for qrows, drows, gq, gd, g in _compatible_groups(codes, qry, max_patterns):
        sums = np.bincount(gd, weights=w[drows], minlength=g)
        out[qrows] += sums[gq].astype(out.dtype)
    return out


def compatible_min_codes(codes: np.ndarray, values: np.ndarray, query: np.ndarray, *,
                         max_patterns: int = MAX_PATTERNS) -> np.ndarray:
    """The min counterpart of :func:`compatible_counts_codes`: for each row of ``query``, the
    smallest ``values[j]`` (int64) over the rows ``j`` of ``codes`` compatible with it, or the
    int64 maximum when none is."""
    codes = np.asarray(codes, dtype=np.int64)
    qry = np.asarray(query, dtype=np.int64)
    vals = np.asarray(values, dtype=np.int64)
    top = np.iinfo(np.int64).max
    out = np.full(len(qry), top, dtype=np.int64)
    if len(qry) == 0 or len(codes) == 0:
        return out
    for qrows, drows, gq, gd, g in _compatible_groups(codes, qry, max_patterns):
        best = np.full(g, top, dtype=np.int64)
        np.minimum.at(best, gd, vals[drows])
        out[qrows] = np.minimum(out[qrows], best[gq])
    return out


def _compatible_groups(codes: np.ndarray, qry: np.ndarray, max_patterns: int):
    """For each pair (null pattern p of a query row, the non-null columns s that p shares with
    some data row's pattern): ``(qrows, drows, gq, gd, g)`` -- the query rows with pattern p,
    the data rows whose non-null columns meet p's in exactly s, and their group ids (of g)
    over the columns s; a query row and a data row are compatible exactly when they fall in
    one group of one pair."""
    m = codes.shape[1]
    dpat, qpat = _patterns_of(codes), _patterns_of(qry)
    dp_unique = np.unique(dpat)
    joins = {int(p): sorted({int(p) & int(q) for q in dp_unique}) for p in np.unique(qpat)}
    _guard(joins, m, max_patterns)
    for p, subsets in joins.items():
        qrows = np.flatnonzero(qpat == p)
        masked = dpat & p
        for s in subsets:
            drows = np.flatnonzero(masked == s)
            cols = _bits(s, m)
            gq, gd, g = _group_ids(qry[np.ix_(qrows, cols)], codes[np.ix_(drows, cols)])
            yield qrows, drows, gq, gd, g


def compatible_counts_reference(rows: Sequence[Sequence[Any]] | np.ndarray) -> np.ndarray:
    """The definition, O(n^2), for tests: ``rows`` is ``(n, m)`` (values, None or NaN for a null);
    record ``i`` counts every record ``j`` (itself included) with ``rows[i][c] == rows[j][c]``
    wherever both are non-null."""
    data = [list(r) for r in rows]
    n = len(data)
    m = len(data[0]) if n else 0
    codes = np.full((n, m), -1, dtype=np.int64)
    for c in range(m):
        seen: dict[Any, int] = {}
        for i in range(n):
            v = data[i][c]
            if v is None or (isinstance(v, float) and np.isnan(v)):
                continue
            codes[i, c] = seen.setdefault(v, len(seen))
    out = np.zeros(n, dtype=np.int64)
    for start in range(0, n, 512):
        a = codes[start:start + 512, None, :]
        b = codes[None, :, :]
        ok = ((a == b) | (a < 0) | (b < 0)).all(axis=2)
        out[start:start + 512] = ok.sum(axis=1)
    return out
