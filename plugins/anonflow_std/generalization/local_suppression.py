"""``local-suppression``: blank a few quasi-identifier cells (publish them as null) until every
record's *compatible count* reaches ``k``, suppressed cells counting as wildcards (sdcMicro's
``localSuppression`` / ``kAnon``).

**The model.** A suppressed cell is published as null and matches any value when classes are
counted (``anonflow_std.common.wildcard``; sdcMicro's ``freqCalc`` with ``alpha = 1``): a
record's compatible count is the number of records that agree with it on every quasi-identifier
where both are non-null, itself included. The step reaches ``k`` when the smallest compatible
count is at least ``k``. Finding the fewest cells to blank is NP-hard (Meyerson and Williams,
2004); this is a greedy heuristic.

**sdcMicro's heuristic** (``R/localSuppression.R``, ``suppSubset``; ``src/calcSuppInds.cpp``):
rounds; in each round the records with ``fk < k`` are visited by decreasing individual risk; for
each, the records at the smallest positive number of differing non-null cells are found, and the
cell of the *least important* key variable on which it differs from one of them is set to NA;
then ``fk`` is recomputed. The default importance ranks variables by their number of distinct
values: the fewest is the most important (suppressed last), the most the least important
(suppressed first), ties in column order.

**This heuristic**, vectorized over all violating records at once (on the distinct keys of the
quasi-identifiers, each with its number of records; records with the same key are treated
alike, as sdcMicro would, and no Python loop runs per record):

1. count every key's compatible count; the keys below ``k`` are the violators;
2. for every violator and each of its non-null cells, count the key with that one cell blanked
   (the same wildcard count, on all candidates at once);
3. each violator picks one cell. ``strategy: importance`` (the default) is sdcMicro's choice:
   the *least important* cell whose blank makes the record compatible with at least one more
   record (for a record with neighbours at one differing cell, exactly sdcMicro's pick among its
   nearest neighbours), or, when no single blank does, the least important non-null cell.
   ``strategy: cells`` spends fewer cells: the least important cell whose blank alone reaches
   ``k``, else the cell whose blank gives the largest count (ties: the least important);
4. a violator whose blanked key would be compatible with a violator visited before it in this
   round (order: lower compatible count first, then key order -- sdcMicro's highest risk first)
   waits for the next round, since that one's blank may lift it too (two keys differing in one
   cell need one blank, not two); after ``2 m + 8`` rounds nobody waits any more, so the loop
   ends (each round blanks one cell of every violator that does not wait, and a key with every
   cell blank is compatible with all ``n >= k`` records);
5. the chosen cells are blanked, and the next round recounts.

Blanking a cell never lowers a compatible count, so the records already at ``k`` stay there.
Cells null in the input are wildcards from the start and are not counted as suppressed here.

**Output.** The records with the blanked cells null (their types kept), the other columns as
they are, and ``_class``: records with the same published key, nulls included, share a class
id (int64, 0, 1, ... in the sorted order of the keys). The typing is unchanged (the convention
asks no marking for a suppressed cell). The step claims ``k-anonymity`` with ``k``, which the
engine checks on the output with the ``k-anonymity`` metric: with nulls in the published
quasi-identifiers it counts them as wildcards too (the smallest compatible count must reach
``k``; docs/algorithms.md, "Suppressed cells as wildcards", lists what every check and risk
measure does with them). It notes the k reached and the cells suppressed per quasi-identifier. More than ``max_cells`` of the
quasi-identifier cells suppressed fails the step with the fraction that would have been needed.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, Algorithm, InputError, Param, RunError, StepContext, TypedTable, sql_ident

from .. import __version__
from ..common.wildcard import compatible_counts_codes, compatible_min_codes, encode_codes

#: rounds in which a violator may wait for a violator visited before it (step 4 above)
WAIT_ROUNDS = 8


def importance_order(quasi: list[str], distinct: np.ndarray, given: list[str] | None) -> list[str]:
    """The quasi-identifiers, most important (suppressed last) first: those ``given`` in their
    order, then the others by sdcMicro's default -- fewest distinct non-null values first,
    ties in typing order."""
    given = list(given or [])
    rest = [quasi[i] for i in np.argsort(np.asarray(distinct), kind="stable") if quasi[i] not in given]
    return given + rest


#: how a violator picks its cell (the ``strategy`` parameter)
STRATEGIES = ("importance", "cells")


def _choose(vi: np.ndarray, ci: np.ndarray, gain: np.ndarray, own: np.ndarray, k: int,
            least_first: np.ndarray, strategy: str) -> np.ndarray:
    """The candidates ``(vi, ci)`` (violator, column) in the order of preference, grouped by
    violator: the first of each group is its pick. ``gain``: the violator's count with that cell
    blanked, ``own``: its count now, ``least_first[c]``: smaller for a less important column."""
    if strategy == "importance":
        # sdcMicro: the least important cell whose blank brings the record together with at least
        # one more record; when none does, the least important cell
        return np.lexsort((least_first[ci], gain <= own, vi))
    if strategy == "cells":
        # the least important cell whose blank alone reaches k; else the largest count
        enough = gain >= k
        return np.lexsort((least_first[ci], np.where(enough, 0, -gain), ~enough, vi))
    raise ValueError(f"unknown strategy {strategy!r}")


def suppress(codes: np.ndarray, weights: np.ndarray, k: int, rank: np.ndarray, strategy: str = "importance",
             wait_rounds: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """The heuristic on distinct keys: ``codes`` ``(K, m)`` int64 (``-1`` null), ``weights``
    the records per key, ``rank[c]`` the importance of column ``c`` (0 = most important).
    ``strategy``: how each violator picks its cell (:func:`_choose`). Returns the codes with the
    blanked cells set to -1, and figures (``rounds``, ``k``)."""
    cur = np.array(codes, dtype=np.int64, copy=True)
    w = np.asarray(weights, dtype=np.int64)
    K, m = cur.shape
    wait_rounds = (2 * m + WAIT_ROUNDS) if wait_rounds is None else wait_rounds
    least_first = -np.asarray(rank, dtype=np.int64)  # smaller = suppress sooner
    rounds = 0
    while True:
        cnt = compatible_counts_codes(cur, w)
        viol = np.flatnonzero(cnt < k)
        if viol.size == 0:
            return cur, {"rounds": rounds, "k": int(cnt.min()) if K else 0}
        rounds += 1
        # candidates: every violator x each of its non-null cells
        vi, ci = np.nonzero(cur[viol] >= 0)
        if vi.size == 0:  # only all-null violators: fewer than k records in all
            raise RunError(f"local-suppression: the table has {int(w.sum())} records, fewer than k = {k}")
        v = viol[vi]
        query = cur[v].copy()
        query[np.arange(len(v)), ci] = -1
        gain = compatible_counts_codes(cur, w, query=query)
        order = _choose(vi, ci, gain, cnt[v], k, least_first, strategy)
        first = np.ones(len(order), dtype=bool)
        first[1:] = vi[order][1:] != vi[order][:-1]
        pick = order[first]  # one candidate per violator, in the order of viol
        pv, pc = v[pick], ci[pick]
        if rounds <= wait_rounds:
            # visiting order: lower count first, then key order; wait when the blanked key is
            # compatible with a violator visited before (its min visiting position < own)
            pos = np.empty(K, dtype=np.int64)
            pos.fill(np.iinfo(np.int64).max)
            visit = viol[np.lexsort((viol, cnt[viol]))]
            pos[visit] = np.arange(len(visit))
            blanked = query[pick]
            first_pos = compatible_min_codes(cur[viol], pos[viol], blanked)
            go = first_pos >= pos[pv]
            pv, pc = pv[go], pc[go]
        cur[pv, pc] = -1


class LocalSuppression(Algorithm):
    name = "local-suppression"
    version = __version__
    description = ("sdcMicro-style local suppression: blank few QI cells, least important QIs first, until every "
                   "record's compatible count (nulls match anything) reaches k.")
    #: one run on the whole table, also after a ``partition`` step: the heuristic works on the
    #: distinct keys (few beside the records), every record meets all others (fewer blanks than
    #: per fragment), and equal published keys get one class id across fragments
    per_fragment = False
    params = (
        Param("k", "int", min=2, help="every record must be compatible with at least k records (itself included)"),
        Param("importance", "list", items="str", default=None, nullable=True,
              help="quasi-identifiers, most important (suppressed last) first; unnamed ones follow, fewest "
                   "distinct values first (sdcMicro's default)"),
        Param("strategy", "str", default="importance", choices=STRATEGIES,
              help="importance: sdcMicro's choice, the least important cell that brings the record together "
                   "with another; cells: the least important cell that alone reaches k, else the one that "
                   "reaches the largest count (fewer cells, more of them in important QIs)"),
        Param("max_cells", "float", default=0.1, min=0.0, max=1.0,
              help="largest fraction of the quasi-identifier cells (records x QIs) that may be suppressed"),
    )

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        # checked by the k-anonymity metric, which counts suppressed cells as wildcards
        return {"k-anonymity": {"k": params["k"]}}

    def check(self, params: Mapping[str, Any], table: TypedTable | None = None, **_: Any) -> None:
        if table is None:
            return
        quasi = table.typing.quasi
        if not quasi:
            raise InputError("local-suppression needs quasi-identifiers; name them under 'quasi' in the typing step")
        given = params.get("importance") or []
        unknown = [c for c in given if c not in quasi]
        if unknown:
            raise InputError(f"local-suppression: importance names {', '.join(map(repr, unknown))}, which "
                             f"{'is' if len(unknown) == 1 else 'are'} not a quasi-identifier (quasi-identifiers: "
                             f"{', '.join(quasi)})")
        twice = sorted({c for c in given if given.count(c) > 1})
        if twice:
            raise InputError(f"local-suppression: importance names {', '.join(map(repr, twice))} more than once")

    def describe_plan(self, params: Mapping[str, Any], table: TypedTable) -> list[str]:
        given = params.get("importance") or []
        order = ", ".join(given) + (" (then the others, fewest distinct values first)" if len(given) < len(
            table.typing.quasi) else "")
        return [f"local-suppression: k = {params['k']} with suppressed cells as wildcards over "
                f"{len(table.typing.quasi)} quasi-identifiers; importance: {order or 'fewest distinct values first'}"]

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        self.check(params, table=table)
        t0 = time.perf_counter()
        quasi = list(table.typing.quasi)
        k = int(params["k"])
        n = table.num_rows
        m = len(quasi)
        if n < k:
            raise RunError(f"local-suppression: the table has {n} records, fewer than k = {k}; no suppression "
                           "can reach it")
        cols = ", ".join(sql_ident(c) for c in quasi)
        keys = ctx.sql(f"SELECT {cols}, count(*)::BIGINT AS _af_n FROM t GROUP BY ALL ORDER BY ALL", t=table)
        codes = encode_codes([keys.column(c) for c in quasi])
        weights = np.asarray(keys.column("_af_n").to_numpy(), dtype=np.int64)
        distinct = codes.max(axis=0, initial=-1) + 1 if len(codes) else np.zeros(m, np.int64)
        order = importance_order(quasi, distinct, params.get("importance"))
        rank = np.array([order.index(c) for c in quasi], dtype=np.int64)

        cur, info = suppress(codes, weights, k, rank, params.get("strategy") or "importance")
        blank = (cur < 0) & (codes >= 0)
        per_qi = (blank * weights[:, None]).sum(axis=0)
        cells = int(per_qi.sum())
        total = n * m
        if cells > total * float(params["max_cells"]) + 1e-9:
            need = cells / total
            raise RunError(f"local-suppression: reaching k = {k} needs {cells} suppressed cells, {need:.2%} of the "
                           f"{n} x {m} = {total} quasi-identifier cells, above max_cells = {params['max_cells']}; "
                           f"--set {ctx.step}.max_cells={np.ceil(need * 10000) / 10000:g} would allow it (or "
                           "generalize the quasi-identifiers first, or lower k)")

        _, inv = np.unique(cur, axis=0, return_inverse=True)
        gen: dict[str, Any] = {f"_af_key{i}": keys.column(c) for i, c in enumerate(quasi)}
        gen.update({f"_af_b{i}": pa.array(blank[:, i]) for i in range(m)})
        gen[CLASS] = pa.array(np.asarray(inv, dtype=np.int64).reshape(-1), type=pa.int64())
        pos = {c: i for i, c in enumerate(quasi)}
        select = ", ".join(
            f"CASE WHEN g._af_b{pos[c]} THEN NULL ELSE t.{sql_ident(c)} END AS {sql_ident(c)}" if c in pos
            else f"t.{sql_ident(c)}" for c in table.columns if c != CLASS)
        on = " AND ".join(f"t.{sql_ident(c)} IS NOT DISTINCT FROM g._af_key{i}" for i, c in enumerate(quasi))
        out = ctx.derive(f"SELECT {select}, g.{sql_ident(CLASS)} FROM base t JOIN gen g ON {on}", ordered=False,
                         base=table, gen=pa.table(gen))

        detail = ", ".join(f"{c} {int(per_qi[pos[c]])}" for c in order)
        ctx.note(f"local-suppression: k = {info['k']} reached (smallest compatible count, suppressed cells as "
                 f"wildcards; asked {k}) in {info['rounds']} round(s) over {len(codes)} distinct keys; "
                 f"{cells} cell(s) suppressed ({cells / total:.2%} of {total}), by quasi-identifier from the most "
                 f"important: {detail}; {time.perf_counter() - t0:.2f} s")
        return TypedTable(None, table.typing, {}, table.hierarchies, stored=out.stored)


PLUGINS = [LocalSuppression()]
