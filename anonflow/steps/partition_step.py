"""The built-in ``partition`` step (:class:`PartitionStep`): cutting a typed table into fragments.

The step (:func:`partition`) adds a ``_fragment`` column to a typed table: records of each
stratum (``by``) are cut recursively at the median of one quasi-identifier until every fragment holds at most ``max_records`` records (Mondrian-style
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
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from ..api import StepContext, sql_ident
from ..errors import InputError, WorkflowError
from ..hierarchy import value_keys
from ..params import Param
from ..schema import CLASS, FRAGMENT, ROW
from ..table import TypedTable
from ..shapes import COLUMN_LIST
from .claims import recheck_claims
from .step import Step, StepOutput, StepRun

#: the default largest fragment of the ``partition`` step: on Adult
#: the smallest size at which maasae's, l-clustering's and the GCAs' paper metrics move by at
#: most 2 % (relative) against a whole-table run, and at which maasae and l-clustering still run
#: a million records in minutes on two cores; the MDAV family's SSE-IL moves more at any size
#: below the whole table (docs/results.md, section 6)
DEFAULT_MAX_RECORDS = 20_000


class PartitionStep(Step):
    uses = kind = "partition"
    cacheable = True
    preparation = True
    keeps_typing = True
    cuts_fragments = True
    description = ("Cut a typed table into fragments (strata, then recursive median cuts on the QIs) so that each "
                   "algorithm step fed by it runs once per fragment, in parallel on an executor.")
    params = (
        Param("max_records", "int", default=DEFAULT_MAX_RECORDS, min=2, nullable=True,
              help="cut until every fragment holds at most this many records; null: strata only"),
        Param("by", "list", default=[], shape=COLUMN_LIST,
              help="strata: columns each combination of whose values is cut on its own"),
        Param("columns", "list", default=None, nullable=True, shape=COLUMN_LIST,
              help="the columns to cut on (null: the quasi-identifiers, less the strata)"),
    )

    def check_params(self, given, registry, where, base_dir=None):
        params = super().check_params(given, registry, where, base_dir)
        for key in ("by", "columns"):
            value = params[key]
            if value is None:
                continue
            if not all(isinstance(c, str) and c for c in value):
                raise WorkflowError(f"parameter {key!r}: expected a list of column names, got {value!r}", where=where)
            if len(set(value)) != len(value):
                raise WorkflowError(f"parameter {key!r} names a column twice", where=where)
            reserved = [c for c in value if c in (ROW, CLASS, FRAGMENT)]
            if reserved:
                raise WorkflowError(f"parameter {key!r}: {reserved[0]!r} is anonflow's own column", where=where)
        if params["max_records"] is None and not params["by"]:
            raise WorkflowError("give 'max_records' or 'by' (or both): a partition needs something to cut by",
                                where=where)
        return params

    def validate(self, params, inputs, registry, where):
        cols = inputs[0].columns
        if cols is not None:
            for key in ("by", "columns"):
                for c in params[key] or ():
                    if c not in cols:
                        raise WorkflowError(f"parameter {key!r}: no column {c!r} in the input "
                                            f"(columns: {', '.join(x for x in cols if x != ROW)})", where=where)
            if FRAGMENT in cols:
                raise WorkflowError("the input is partitioned already; partition the typed table once",
                                    where=where)
            if CLASS in cols:
                raise WorkflowError(f"input {inputs[0].name!r} is an algorithm's output; partition the typed table "
                                    "the algorithm reads instead", where=where)
        if not inputs[0].typed:
            raise WorkflowError(f"partition needs a typed table: add a typing step before it "
                                f"(input {inputs[0].name!r})", where=where)
        return None if cols is None else (*cols, FRAGMENT)

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext,
            where: str) -> tuple[TypedTable, dict[str, Any]]:
        return partition(table, params, ctx, where)

    def execute(self, run: StepRun) -> StepOutput:
        typed, summary = self.run(run.tables[0], run.node.params, run.ctx, run.where)
        run.keep(recheck_claims(typed, run.node, run.ctx, run.where, run.registry))
        return StepOutput(summary=summary)

    def preview(self, summary: dict[str, Any], output: Any) -> dict[str, Any]:
        return {"fragments": {k: summary.get(k) for k in ("fragments", "sizes", "cuts")},
                "notes": summary.get("notes", [])}



def _q(name: str) -> str:
    return sql_ident(name)


def partition(table: TypedTable, params: Mapping[str, Any], ctx: StepContext,
              where: str) -> tuple[TypedTable, dict[str, Any]]:
    """The ``partition`` step (:class:`PartitionStep`): ``table`` with a
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


def aggregate_ordered(ctx: StepContext, query: str, order: str, **tables: TypedTable | pa.Table) -> pa.Table:
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
    sizes = aggregate_ordered(ctx, f"SELECT {f} AS f, count(*)::BIGINT AS n FROM a GROUP BY 1", "f", a=frag)
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
        sizes = aggregate_ordered(ctx, f"SELECT {f} AS f, count(*)::BIGINT AS n FROM a GROUP BY 1", "f", a=frag)
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
    got = aggregate_ordered(
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
    return aggregate_ordered(ctx, f"SELECT {', '.join(parts)} FROM t GROUP BY {f}", "fragment", t=table)
