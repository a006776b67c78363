"""Cutting a typed table into fragments, and grouping fragments for an algorithm.

The built-in ``partition`` step (:class:`anonflow.builtins.PartitionStep`, :func:`partition`) adds a ``_fragment`` column to a typed
table: records of each stratum (``by``) are cut recursively at the median of one
quasi-identifier until every fragment holds at most ``max_records`` records (Mondrian-style
fragmentation, as in the distributed Mondrian of De Capitani di Vimercati et al., and
sdcMicro's microaggregation within strata). Each cut is computed by DuckDB where the table is
stored; nothing but per-fragment counts and bounds comes back to Python.

A cut splits a fragment at the median of the chosen column's keys: the records with a key
below it (or at most it, whichever is more even and leaves both parts non-empty) go left, the
rest (missing values included) right, so records with equal values stay together. The column
cut is the one whose keys span the largest share of their range over the whole table
(Mondrian's choice) among those whose cut leaves at least a fiftieth of the records on each side,
the first listed on a tie (when none does, the column cut most evenly); a fragment no column
separates (its records alike on every cut column) is halved by ``_row``. So the
recursion always ends, and the fragments are the same on every machine. Keys: a continuous QI's value; an ordinal QI's rank in its
declared order; a semantic QI's code as text (codes of a prefix together); a nominal QI's rank
in its hierarchy's order (siblings next to each other) when the table has a hierarchy for it,
else in frequency order (most frequent first, then by value). A missing value sorts last.

An algorithm step fed by a partitioned table runs once per *group* of fragments
(:func:`fragment_groups`): one fragment each, unless a fragment taken as a single class fails
a privacy model the algorithm claims (too few records, too few distinct sensitive values...),
in which case it is merged with a neighbouring fragment (the next or the previous in fragment
order, the smaller of the two) until every group satisfies the models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from .api import Partition, StepContext, sql_ident
from .errors import InputError
from .hierarchy import value_keys
from .schema import CLASS, FRAGMENT, ROW
from .table import TypedTable



def _q(name: str) -> str:
    return sql_ident(name)


def partition(table: TypedTable, params: Mapping[str, Any], ctx: StepContext,
              where: str) -> tuple[TypedTable, dict[str, Any]]:
    """The ``partition`` step (:class:`anonflow.builtins.PartitionStep`): ``table`` with a
    ``_fragment`` column, and the step's summary."""
    by = list(params["by"])
    cut = list(params["columns"]) if params["columns"] is not None else \
        [c for c in table.typing.quasi if c not in by]
    for c in (*by, *cut):
        if c not in table.columns:
            raise InputError(f"no column {c!r} in the input", where=where)
    if FRAGMENT in table.columns or CLASS in table.columns:
        raise InputError(f"the input has a {FRAGMENT if FRAGMENT in table.columns else CLASS} column; "
                         "partition the typed table, before any algorithm", where=where)
    cut = [c for c in cut if c not in by]
    if table.num_rows == 0:
        raise InputError("the input has no records", where=where)
    limit = params["max_records"]
    keys, key_notes = _keys(table, cut, ctx)
    for line in key_notes:
        ctx.note(line)
    frag = _strata(table, by, ctx)
    levels = 0
    if limit is not None and cut:
        frag, levels = _cut(frag, keys, cut, limit, ctx)
    elif limit is not None:
        big = ctx.sql(f"SELECT max(n) FROM (SELECT count(*) AS n FROM a GROUP BY {_q(FRAGMENT)})", a=frag)
        if int(big.column(0)[0].as_py()) > limit:
            ctx.note("no column to cut on: fragments larger than max_records stay whole")
    ctx.discard(keys)
    out = ctx.derive(f"SELECT t.*, a.{_q(FRAGMENT)} FROM t POSITIONAL JOIN a", t=table, a=frag)
    ctx.discard(frag)
    bounds = fragment_bounds(out, by, cut, ctx)
    sizes = bounds.column("records").to_numpy()
    ctx.store_table and ctx.store_table("fragments", bounds)
    summary = {"fragments": int(sizes.size), "records": int(sizes.sum()), "max_records": limit, "by": by,
               "columns": cut, "cuts": levels, "sizes": _size_summary(sizes)}
    strata = len({tuple(row.values()) for row in bounds.select(by).to_pylist()}) if by else 1
    ctx.note(f"{sizes.size} fragment(s) of {describe_sizes(sizes)} records"
             + (f" in {strata} strat{'um' if strata == 1 else 'a'}" if by else "")
             + (f"; cut on {', '.join(cut)} ({levels} level(s) of median cuts)" if levels else ""))
    typed = TypedTable(None, table.typing, table.claims, table.hierarchies, stored=out.stored)
    return typed, summary



def describe_sizes(sizes: np.ndarray) -> str:
    if sizes.size == 0:
        return "no"
    lo, mid, hi = int(sizes.min()), int(np.median(sizes)), int(sizes.max())
    return f"{lo:,}" if lo == hi else f"{lo:,}..{hi:,} (median {mid:,})"


def _size_summary(sizes: np.ndarray) -> dict[str, int]:
    return {"min": int(sizes.min()), "median": int(np.median(sizes)), "max": int(sizes.max())}


def _ranks(table: TypedTable, column: str, ctx: StepContext) -> tuple[pa.Table, str]:
    """(value, rank) of every distinct non-missing value of a categorical column, and the
    order's name: an ordinal's declared order, a semantic column's code order (as text), the
    hierarchy's order, or frequency (most frequent first)."""
    counts = ctx.sql(f"SELECT {_q(column)} AS v, count(*)::BIGINT AS n FROM t WHERE {_q(column)} IS NOT NULL "
                     "GROUP BY 1", t=table)
    values = counts.column("v")
    texts = value_keys(values).to_pylist()
    attr = table.typing.get(column) if column in table.typing.names() else None
    hier = table.hierarchies.get(column)
    if attr is not None and attr.type == "ordinal" and attr.order:
        pos = {str(v): i for i, v in enumerate(attr.order)}
        rank = np.array([pos.get(t, len(pos)) for t in texts], dtype=np.float64)
        how = "declared order"
    elif attr is not None and attr.type == "semantic":
        # codes (e.g. 6-digit classifications) sorted as text: a prefix's codes lie together
        order = sorted(range(len(texts)), key=lambda i: texts[i])
        rank = np.empty(len(texts), dtype=np.float64)
        rank[order] = np.arange(len(texts), dtype=np.float64)
        how = "code order"
    elif hier is not None:
        # leaves ordered by their path from the top, so that siblings are neighbours
        levels = [hier.level(i).to_pylist() for i in range(hier.height, -1, -1)]
        paths = sorted(zip(*levels))
        pos = {path[-1]: i for i, path in enumerate(paths)}
        rank = np.array([pos.get(t, len(pos)) for t in texts], dtype=np.float64)
        how = "hierarchy order"
    else:
        n = counts.column("n").to_numpy()
        order = sorted(range(len(texts)), key=lambda i: (-int(n[i]), texts[i]))
        rank = np.empty(len(texts), dtype=np.float64)
        rank[order] = np.arange(len(texts), dtype=np.float64)
        how = "frequency order"
    return pa.table({"v": values, "r": pa.array(rank)}), how


def _keys(table: TypedTable, cut: Sequence[str], ctx: StepContext) -> tuple[TypedTable, list[str]]:
    """A stored table (``_row``, ``_k0`` .. ``_kN``): each cut column's sort key as a double."""
    exprs, joins, tables = [], [], {"t": table}
    notes: dict[str, list[str]] = {}
    for i, c in enumerate(cut):
        attr = table.typing.get(c) if c in table.typing.names() else None
        typ = table.schema.field(c).type
        numeric = pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ)
        if (attr is None or attr.type in (None, "continuous")) and numeric:
            exprs.append(f"CAST(t.{_q(c)} AS DOUBLE) AS _k{i}")
            continue
        ranks, how = _ranks(table, c, ctx)
        tables[f"r{i}"] = ranks
        joins.append(f"LEFT JOIN r{i} ON t.{_q(c)} = r{i}.v")
        exprs.append(f"r{i}.r AS _k{i}")
        notes.setdefault(how, []).append(c)
    cols = ", ".join([f"t.{_q(ROW)}", *exprs]) if exprs else f"t.{_q(ROW)}"
    lines = [f"{', '.join(cs)} cut in {how}" for how, cs in notes.items()]
    return ctx.derive(f"SELECT {cols} FROM t {' '.join(joins)}", ordered=not joins, **tables), lines


def _strata(table: TypedTable, by: Sequence[str], ctx: StepContext) -> TypedTable:
    """(``_row``, ``_fragment``): each record's stratum, numbered in the order of the strata's
    values (NULL last; a missing-value category such as ``?`` sorts as its text)."""
    if not by:
        return ctx.derive(f"SELECT {_q(ROW)}, 0::BIGINT AS {_q(FRAGMENT)} FROM t", t=table)
    cols = ", ".join(_q(c) for c in by)
    order = ", ".join(f"{_q(c)} ASC NULLS LAST" for c in by)
    return ctx.derive(f"SELECT {_q(ROW)}, (dense_rank() OVER (ORDER BY {order}) - 1)::BIGINT AS {_q(FRAGMENT)} "
                      f"FROM (SELECT {_q(ROW)}, {cols} FROM t)", ordered=False, t=table)


def _aggregate(ctx: StepContext, query: str, order: str, **tables: TypedTable | pa.Table) -> pa.Table:
    """A small result of a query over the whole table: run by DuckDB on all its threads
    (counts, minima and maxima come out the same on any number), read back in ``order``."""
    small = ctx.derive(query, **tables)
    try:
        return ctx.sql(f"SELECT * FROM r ORDER BY {order}", r=small)
    finally:
        ctx.discard(small)


def _cut(frag: TypedTable, keys: TypedTable, cut: Sequence[str], limit: int,
         ctx: StepContext) -> tuple[TypedTable, int]:
    """Cut every fragment above ``limit`` records in two, level by level, until none is."""
    f, r = _q(FRAGMENT), _q(ROW)
    ks = [f"_k{i}" for i in range(len(cut))]
    whole = ctx.sql("SELECT " + ", ".join(f"max({k}) - min({k})" for k in ks) + " FROM k", k=keys).to_pylist()[0]
    span = np.array([b if b else 1.0 for b in whole.values()], dtype=np.float64)
    sizes = _aggregate(ctx, f"SELECT {f} AS f, count(*)::BIGINT AS n FROM a GROUP BY 1", "f", a=frag)
    levels = 0
    while True:
        ids, n = sizes.column("f").to_numpy(), sizes.column("n").to_numpy()
        big = n > limit
        if not big.any():
            return frag, levels
        plan = _split_plan(frag, keys, ks, ids, n, big, span, ctx)
        key = "CASE p.col " + " ".join(f"WHEN {i} THEN k.{k}" for i, k in enumerate(ks)) + " END"
        left = f"CASE WHEN p.strict THEN {key} < p.m ELSE {key} <= p.m END"
        parts = [f"SELECT a.{r}, (p.base + CASE WHEN p.col < 0 THEN 0 ELSE (NOT coalesce({left}, false))::BIGINT "
                 f"END)::BIGINT AS {f} FROM a POSITIONAL JOIN k JOIN p ON a.{f} = p.f WHERE NOT p.pos"]
        if bool(np.any(plan.column("pos").to_numpy(zero_copy_only=False))):
            # no column separates the records (all alike on every cut column): halve by position
            parts.append(f"SELECT a.{r}, (p.base + (row_number() OVER (PARTITION BY a.{f} ORDER BY a.{r}) > p.half)"
                         f"::BIGINT)::BIGINT AS {f} FROM a JOIN p ON a.{f} = p.f WHERE p.pos")
        nxt = ctx.derive(f"SELECT {r}, {f} FROM ({' UNION ALL '.join(parts)})", ordered=False, a=frag, k=keys,
                         p=plan)
        ctx.discard(frag)
        frag = nxt
        sizes = _aggregate(ctx, f"SELECT {f} AS f, count(*)::BIGINT AS n FROM a GROUP BY 1", "f", a=frag)
        levels += 1


#: a cut leaving fewer than this share of a fragment's records on one side is taken only when
#: no column cuts more evenly (a column of mostly equal values would otherwise shave off a few
#: records). Kept small: a lopsided cut that isolates rare values (Adult's non-zero capital
#: gains, 8 %) is what keeps microaggregation's loss low (with a tenth, mdav's SSE-IL on Adult at 2,000
#: records per fragment was 4.22 % instead of 2.90 %)
BALANCE = 0.02


def _split_plan(frag: TypedTable, keys: TypedTable, ks: Sequence[str], ids: np.ndarray, n: np.ndarray,
                big: np.ndarray, span: np.ndarray, ctx: StepContext) -> pa.Table:
    """How each fragment is cut at this level: the column (-1: not cut), the median value
    ``m`` of its keys, whether the left part is ``key < m`` (``strict``) or ``key <= m`` (the
    more even of the two that leaves both parts non-empty), or ``pos``: halved by position.
    The column is the widest one (its keys' range over their range in the whole table, as
    Mondrian chooses) among those whose median cut leaves at least :data:`BALANCE` of the
    records on each side, the first on a tie; when none does, the column cut most evenly."""
    f = _q(FRAGMENT)
    want = pa.table({"f": pa.array(ids[big])})
    # each column's distinct keys per fragment with their records (a plain GROUP BY, which
    # DuckDB spills), their running count in key order, and the key holding position
    # (n - 1) // 2 of the fragment's non-missing keys: the median, with the records below it
    # (lt) and at most it (le), and the keys' range
    names = ", ".join(f"k.{k}" for k in ks)
    got = _aggregate(
        ctx, f"WITH u AS (UNPIVOT (SELECT a.{f} AS f, {names} FROM a POSITIONAL JOIN k SEMI JOIN w ON a.{f} = w.f) "
        f"ON {', '.join(ks)} INTO NAME col VALUE v), "
        "c AS (SELECT f, col, v, count(*)::BIGINT AS c FROM u GROUP BY ALL), "
        "s AS (SELECT f, col, v, c, sum(c) OVER (PARTITION BY f, col ORDER BY v ROWS BETWEEN UNBOUNDED PRECEDING "
        "AND CURRENT ROW)::BIGINT AS cum, sum(c) OVER (PARTITION BY f, col)::BIGINT AS nn, "
        "max(v) OVER (PARTITION BY f, col) - min(v) OVER (PARTITION BY f, col) AS w FROM c) "
        "SELECT f, col, v AS m, cum - c AS lt, cum AS le, w FROM s "
        "WHERE cum > (nn - 1) // 2 AND cum - c <= (nn - 1) // 2", "f, col", a=frag, k=keys, w=want)
    d = len(ks)
    nb = n[big]
    row = np.searchsorted(ids[big], got.column("f").to_numpy())
    col_of = {k: i for i, k in enumerate(ks)}
    j = np.array([col_of[c] for c in got.column("col").to_pylist()], dtype=np.int64)
    width, medians = np.zeros((nb.size, d)), np.zeros((nb.size, d))
    lt, le = np.zeros((nb.size, d), dtype=np.int64), np.zeros((nb.size, d), dtype=np.int64)
    width[row, j] = got.column("w").to_numpy(zero_copy_only=False).astype(np.float64) / span[j]
    medians[row, j] = got.column("m").to_numpy(zero_copy_only=False).astype(np.float64)
    lt[row, j] = got.column("lt").to_numpy()
    le[row, j] = got.column("le").to_numpy()
    half = nb[:, None] / 2.0
    strict = (lt > 0) & ((np.abs(lt - half) <= np.abs(le - half)) | (le >= nb[:, None]))
    left = np.where(strict, lt, le)
    ok = (left > 0) & (left < nb[:, None])
    smaller = np.minimum(left, nb[:, None] - left)
    even = ok & (smaller >= BALANCE * nb[:, None])
    # the widest column among those cut evenly enough; else the most even cut; else by position
    col = np.where(even.any(axis=1), np.argmax(np.where(even, width, -1.0), axis=1),
                   np.argmax(np.where(ok, smaller, -1), axis=1))
    pos = ~ok.any(axis=1)
    rows = np.arange(col.size)
    m = medians[rows, col]
    # new ids in fragment order: a fragment cut in two takes two consecutive ids
    count = np.where(big, 2, 1)
    base = np.cumsum(count) - count
    every_col = np.full(ids.size, -1, dtype=np.int64)
    every_col[big] = col
    every = {"f": ids, "base": base, "col": every_col, "m": np.zeros(ids.size), "strict": np.zeros(ids.size, bool),
             "pos": np.zeros(ids.size, bool), "half": n // 2}
    every["m"][big] = np.nan_to_num(m)
    every["strict"][big] = strict[rows, col]
    every["pos"][big] = pos
    return pa.table({k: pa.array(v) for k, v in every.items()})


def fragment_bounds(table: TypedTable, by: Sequence[str], cut: Sequence[str], ctx: StepContext) -> pa.Table:
    """One row per fragment: its id, records, strata values and each cut column's least and
    greatest value (missing values not counted)."""
    f = _q(FRAGMENT)
    parts = [f"{f} AS fragment", "count(*)::BIGINT AS records"]
    parts += [f"any_value({_q(c)}) AS {_q(c)}" for c in by]
    for c in cut:
        parts += [f"min({_q(c)}) AS {_q(c + '_min')}", f"max({_q(c)}) AS {_q(c + '_max')}"]
    return _aggregate(ctx, f"SELECT {', '.join(parts)} FROM t GROUP BY {f}", "fragment", t=table)


# -- grouping fragments for an algorithm --------------------------------------------------


@dataclass
class Grouping:
    """Fragments grouped for one algorithm step: ``groups[g]`` lists the fragment ids run
    together as group ``g`` (in fragment order); ``sizes[g]`` its records."""

    groups: list[list[int]]
    sizes: list[int]
    notes: list[str]

    @property
    def merged(self) -> int:
        return sum(len(g) for g in self.groups if len(g) > 1)


def fragment_sizes(table: TypedTable, ctx: StepContext) -> tuple[np.ndarray, np.ndarray]:
    got = _aggregate(ctx, f"SELECT {_q(FRAGMENT)}, count(*)::BIGINT AS n FROM t GROUP BY 1", "1", t=table)
    return got.column(0).to_numpy(), got.column(1).to_numpy()


def _claim_checks(algo: Any, params: Mapping[str, Any], registry: Any) -> tuple[list[tuple[Any, dict]], list[str]]:
    checks, skipped = [], []
    for model, given in algo.claims(params).items():
        reg = registry.get("metric", model) if registry.has("metric", model) else None
        if reg is None or reg.obj.category != "privacy" or not getattr(reg.obj, "weighted_partitions", False):
            skipped.append(model)
            continue
        checks.append((reg.obj, dict(given)))
    return checks, skipped


def fragment_groups(algo: Any, params: Mapping[str, Any], table: TypedTable, registry: Any,
                    ctx: StepContext) -> Grouping:
    """Group the fragments of ``table`` so that each group, taken as one class, satisfies every
    privacy model ``algo`` claims for ``params`` (checked through the models' vectorized
    :meth:`~anonflow.api.Metric.partition_holds` on a frequency table of the sensitive
    attributes by fragment, which DuckDB computes). A failing group is merged with its next or
    previous neighbour (the smaller), round after round, until all hold or one group is left."""
    ids, sizes = fragment_sizes(table, ctx)
    checks, skipped = _claim_checks(algo, params, registry)
    notes = []
    if skipped:
        notes.append(f"fragments not checked for {', '.join(skipped)} before the run (no weighted check); "
                     "the algorithm's own check runs on each fragment")
    if not checks or ids.size <= 1:
        return Grouping([[int(i)] for i in ids], [int(s) for s in sizes], notes)
    keep = [c for c in table.typing.sensitive if c in table.columns]
    named = params.get("sensitive")
    if isinstance(named, str) and named in table.columns and named not in keep:
        keep.append(named)
    cols = "".join(f", {_q(c)}" for c in keep)
    freq = _aggregate(ctx, f"SELECT {_q(FRAGMENT)}{cols}, count(*)::BIGINT AS _af_n FROM t GROUP BY ALL",
                      "ALL NULLS LAST", t=table)
    of_row = np.searchsorted(ids, freq.column(0).to_numpy())
    weights = freq.column("_af_n").to_numpy()
    units = TypedTable(freq.drop_columns([FRAGMENT, "_af_n"]), table.typing, {}, table.hierarchies)
    groups: list[list[int]] = [[i] for i in range(ids.size)]  # positions of fragments
    gsizes = [int(s) for s in sizes]
    cache: dict[str, Any] = {}
    first = len(groups)
    while True:
        group_of = np.empty(ids.size, dtype=np.int64)
        for g, members in enumerate(groups):
            group_of[members] = g
        cls = group_of[of_row]
        part = Partition(cls, np.asarray(gsizes, dtype=np.int64), units, cache, weights)
        ok = np.ones(len(groups), dtype=bool)
        for metric, given in checks:
            ok &= np.asarray(metric.partition_holds(part, given), dtype=bool)
        if ok.all() or len(groups) == 1:
            break
        groups, gsizes = merge_neighbours(groups, gsizes, np.flatnonzero(~ok).tolist())
    out = [[int(ids[i]) for i in g] for g in groups]
    if len(groups) < first:
        joined = [g for g in out if len(g) > 1]
        models = ", ".join(m.name for m, _ in checks)
        notes.append(f"{sum(len(g) for g in joined)} fragment(s) too small or too poor for {models} (each taken as "
                     f"one class) were merged with neighbours into {len(joined)} group(s): "
                     + "; ".join("+".join(map(str, g)) for g in joined[:8]) + (" ..." if len(joined) > 8 else ""))
    if not ok.all():
        notes.append(f"even all fragments together fail {', '.join(m.name for m, _ in checks)}; the algorithm "
                     "will say why")
    return Grouping(out, gsizes, notes)


def keep_classes_together(groups: list[list[int]], sizes: list[int], table: TypedTable, other: TypedTable,
                          ctx: StepContext) -> tuple[list[list[int]], list[int], str | None]:
    """Join the groups holding records of one class of ``other`` (a second input with
    ``_class``, e.g. the partition a ``refine`` step improves): a class is never cut by the
    fragments. Returns the groups (in order of their first fragment), their sizes and a note."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    pairs = ctx.sql(f"SELECT DISTINCT x.{_q(CLASS)} AS c, t.{_q(FRAGMENT)} AS f FROM x JOIN t "
                    f"ON x.{_q(ROW)} = t.{_q(ROW)} WHERE x.{_q(CLASS)} IS NOT NULL ORDER BY 1, 2", x=other, t=table)
    if pairs.num_rows == 0:
        return groups, sizes, None
    frags = np.array([f for members in groups for f in members], dtype=np.int64)
    group_of = np.zeros(int(frags.max()) + 1, dtype=np.int64)
    group_of[frags] = np.repeat(np.arange(len(groups)), [len(m) for m in groups])
    c = pairs.column("c").to_numpy()
    g = group_of[pairs.column("f").to_numpy()]
    same = np.flatnonzero(c[1:] == c[:-1])
    if same.size == 0 or np.all(g[same] == g[same + 1]):
        return groups, sizes, None
    n = len(groups)
    graph = coo_matrix((np.ones(same.size), (g[same], g[same + 1])), shape=(n, n))
    count, label = connected_components(graph, directed=False)
    joined: dict[int, list[int]] = {}
    joined_sizes: dict[int, int] = {}
    for i, lab in enumerate(label):
        joined.setdefault(int(lab), []).extend(groups[i])
        joined_sizes[int(lab)] = joined_sizes.get(int(lab), 0) + sizes[i]
    order = sorted(joined, key=lambda lab: min(joined[lab]))
    out = [sorted(joined[lab]) for lab in order]
    note = (f"{n - count} fragment group(s) joined others: records of one class of the second input lie in both "
            "(a class is never cut)")
    return out, [joined_sizes[lab] for lab in order], note


def merge_neighbours(groups: list[list[int]], sizes: list[int], bad: Sequence[int]) -> tuple[list[list[int]],
                                                                                              list[int]]:
    """Merge each group in ``bad`` (indexes into ``groups``) with its smaller neighbour; return
    the new groups and sizes, in fragment order."""
    target = list(range(len(groups)))
    taken = [False] * len(groups)
    for g in sorted(set(bad)):
        if taken[g]:
            continue
        options = [h for h in (g - 1, g + 1) if 0 <= h < len(groups) and not taken[h]]
        if not options:
            continue
        h = min(options, key=lambda x: (sizes[x], x))
        lo, hi = min(g, h), max(g, h)
        target[hi] = lo
        taken[lo] = taken[hi] = True
    out: dict[int, list[int]] = {}
    out_sizes: dict[int, int] = {}
    for g, t in enumerate(target):
        out.setdefault(t, []).extend(groups[g])
        out_sizes[t] = out_sizes.get(t, 0) + sizes[g]
    keys = sorted(out)
    return [sorted(out[k]) for k in keys], [out_sizes[k] for k in keys]


__all__ = ["partition", "Grouping", "fragment_groups", "merge_neighbours",
           "fragment_bounds", "describe_sizes"]
