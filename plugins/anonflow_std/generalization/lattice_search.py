"""The lattice of full-domain generalizations and its search (SPEC section 6): the nodes'
partitions rolled up from finer ones (:class:`Space`), a node's verdict, the scorer of the
utility metric and its loss bound, and the Flash-style search with predictive tagging
(:class:`Search`), as the ``lattice`` algorithm (:mod:`anonflow_std.generalization.lattice`,
whose docstring describes the search) runs them.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, InputError, TypedTable, sql_ident

from ..common.hierarchy_levels import Levels, LossModel


#: evaluated partitions kept to roll coarser nodes up from.
CACHE = 48


#: anchor partitions (nodes with every level 0 or 1) kept to roll nodes up from.
ANCHORS = 64


#: largest key space grouped by a dense bincount instead of a sort (times the rows grouped).
DENSE_FACTOR = 4


#: a node whose lower bound is this far above the best exact loss found can neither beat nor
#: tie it (the choice's ties are 1e-12; it orders bounds rounded to 12 decimals)
BOUND_MARGIN = 1e-9


def _group(cols: list[np.ndarray], cards: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Group rows given as integer code columns (``cols[i]`` in ``0 .. cards[i]-1``).

    Returns ``(inverse, reps)``: each row's group id, groups numbered in the order of their
    code tuples (first column most significant), and each group's codes, one array per
    column."""
    m = len(cols[0]) if cols else 0
    key = np.zeros(m, dtype=np.int64)
    radix = 1
    dense_ok = True
    for c, card in zip(cols, cards):
        if card == 1:
            continue
        if radix * card >= 1 << 62:
            uniq, key = np.unique(key, return_inverse=True)
            key = key.astype(np.int64).ravel()
            radix = len(uniq)
            dense_ok = False
        key = key * card + c if radix > 1 else c.astype(np.int64, copy=True)
        radix *= card
    if not dense_ok:
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return inverse.ravel().astype(np.int64), [c[first] for c in cols]
    if radix <= max(1 << 12, DENSE_FACTOR * m):
        present = np.zeros(radix, dtype=bool)
        present[key] = True
        ukeys = np.flatnonzero(present)
        rank = np.empty(radix, dtype=np.int64)
        rank[ukeys] = np.arange(len(ukeys), dtype=np.int64)
        inverse = rank[key]
    else:
        ukeys, inverse = np.unique(key, return_inverse=True)
        inverse = inverse.ravel().astype(np.int64)
    reps: list[np.ndarray] = [np.zeros(0)] * len(cols)
    rest = ukeys.astype(np.int64)
    for i in range(len(cols) - 1, -1, -1):
        if cards[i] == 1:
            reps[i] = np.zeros(len(ukeys), dtype=np.int64)
            continue
        reps[i] = rest % cards[i]
        rest = rest // cards[i]
    return inverse, reps


@dataclass
class Part:
    """The classes of one node: per record class ids, class sizes and label codes."""

    levels: tuple[int, ...]
    classes: np.ndarray | None   # None until needed (see Space.classes)
    sizes: np.ndarray
    reps: list[np.ndarray]   # per QI: each class's label code at the node's level


class Space:
    """The lattice of a table's QI hierarchies, with the records coded once."""

    def __init__(self, table: TypedTable, quasi: list[str], weights: np.ndarray | None = None) -> None:
        """``table``: the records, or (with ``weights``) a frequency table, each row standing
        for ``weights[r]`` records; a "record" below is then a row of it."""
        self.table = table
        self.quasi = quasi
        self.weights = weights
        self.n = int(weights.sum()) if weights is not None else table.num_rows
        self.levels = [Levels(table.hierarchies[q]) for q in quasi]
        self.d = len(quasi)
        self.heights = np.array([lv.height for lv in self.levels], dtype=np.int64)
        self.shape = tuple(int(h) + 1 for h in self.heights)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.rows = [lv.rows(table.column(q)) for q, lv in zip(quasi, self.levels)]
        self._ups: dict[tuple[int, int, int], np.ndarray] = {}
        cols = [lv.codes[0][r] for lv, r in zip(self.levels, self.rows)]
        inverse, reps = _group(cols, [lv.cards[0] for lv in self.levels])
        sizes = np.bincount(inverse, weights=weights, minlength=len(reps[0])).astype(np.int64, copy=False)
        self.bottom = Part(tuple([0] * self.d), inverse, sizes, reps)
        self._cache: list[Part] = []
        self._cache_levels = np.zeros((CACHE, self.d), dtype=np.int64)
        self._cache_sizes = np.zeros(CACHE, dtype=np.int64)
        self._next = 0
        self._anchors: dict[tuple[int, ...], Part] = {}
        self.evaluations = 0
        #: the population table's distinct level-0 code tuples and their records (set_population)
        self.pop_reps: list[np.ndarray] | None = None
        self.pop_sizes: np.ndarray | None = None
        #: compute per-record class ids with every partition (once a check has asked for them)
        self.eager = False

    @property
    def has_population(self) -> bool:
        return self.pop_sizes is not None

    def set_population(self, population: TypedTable, name: str) -> None:
        """Code the population table's quasi-identifiers through the same hierarchies (each
        value must have a row in its QI's hierarchy) and group them once: a node's population
        count per class (:meth:`population_sizes`) then maps these groups' codes up to the
        node's levels. The sample must be part of the population: at the bottom node every
        class needs at least as many population records as sample records (then every node
        does, its counts being sums of the bottom's)."""
        cols = []
        for q, lv in zip(self.quasi, self.levels):
            if q not in population.columns:
                raise InputError(f"lattice: the population table {name!r} has no column {q!r} (a quasi-identifier)")
            try:
                rows = lv.rows(population.column(q))
            except InputError as exc:
                raise InputError(f"lattice: population table {name!r}: {exc}; build the hierarchy so that it "
                                 "covers the population's values") from None
            cols.append(lv.codes[0][rows])
        inverse, reps = _group(cols, [lv.cards[0] for lv in self.levels]) if cols else (np.zeros(0, np.int64), [])
        self.pop_reps = reps
        self.pop_sizes = np.bincount(inverse, minlength=len(reps[0]) if reps else 0).astype(np.int64)
        pop = self.population_sizes(self.bottom)
        short = np.flatnonzero(pop < self.bottom.sizes)
        if short.size:
            j = int(short[0])
            values = ", ".join(f"{q}={lv.labels[0][int(self.bottom.reps[i][j])].as_py()!r}"
                               for i, (q, lv) in enumerate(zip(self.quasi, self.levels)))
            raise InputError(f"lattice: the population table {name!r} holds {int(pop[j])} record(s) with {values}, "
                             f"fewer than the table's {int(self.bottom.sizes[j])}: the table must be a sample of "
                             f"the population ({short.size} such combination(s))")

    def population_sizes(self, part: Part) -> np.ndarray:
        """Per class of ``part``, the population records whose QI values generalize to the
        class's labels at ``part``'s levels (int64). The classes and the population's groups,
        both as label codes at those levels, are grouped together: a class and the groups it
        shares a key with get one group id."""
        assert self.pop_reps is not None and self.pop_sizes is not None
        c = len(part.sizes)
        cols = [np.concatenate([part.reps[i], self.up(i, 0, l)[self.pop_reps[i]]])
                for i, l in enumerate(part.levels)]
        inverse, reps = _group(cols, [lv.cards[l] for lv, l in zip(self.levels, part.levels)])
        owner = np.full(len(reps[0]) if reps else 1, -1, dtype=np.int64)
        owner[inverse[:c]] = np.arange(c, dtype=np.int64)
        of = owner[inverse[c:]]
        hit = of >= 0
        return np.bincount(of[hit], weights=self.pop_sizes[hit], minlength=c).astype(np.int64)

    def up(self, i: int, a: int, b: int) -> np.ndarray:
        key = (i, a, b)
        if key not in self._ups:
            self._ups[key] = self.levels[i].up(a, b)
        return self._ups[key]

    def partition(self, levels: tuple[int, ...]) -> Part:
        """The classes of ``levels``, rolled up from the coarsest cached node below it."""
        target = np.array(levels, dtype=np.int64)
        base = self.bottom
        if self._cache:
            below = np.all(self._cache_levels[: len(self._cache)] <= target, axis=1)
            if below.any():
                sizes = np.where(below, self._cache_sizes[: len(self._cache)], np.iinfo(np.int64).max)
                j = int(np.argmin(sizes))
                if self._cache[j].levels == levels:
                    return self._cache[j]
                if sizes[j] < len(base.sizes):
                    base = self._cache[j]
        if base is self.bottom:
            # nothing evaluated below: go through the anchor min(levels, 1), kept apart --
            # the high-cardinality level-0 codes are then grouped once per anchor, not per node
            anchor = tuple(min(v, 1) for v in levels)
            if anchor != levels and any(anchor):
                if anchor not in self._anchors:
                    if len(self._anchors) >= ANCHORS:
                        self._anchors.pop(next(iter(self._anchors)))
                    self._anchors[anchor] = self._rollup(self.bottom, anchor)
                base = self._anchors[anchor]
        part = self._rollup(base, levels)
        self.evaluations += 1
        slot = self._next % CACHE
        if len(self._cache) < CACHE:
            self._cache.append(part)
        else:
            self._cache[slot] = part
        self._cache_levels[slot] = target
        self._cache_sizes[slot] = len(part.sizes)
        self._next += 1
        return part

    def _rollup(self, base: Part, levels: tuple[int, ...]) -> Part:
        cols = [base.reps[i] if base.levels[i] == levels[i] else self.up(i, base.levels[i], levels[i])[base.reps[i]]
                for i in range(self.d)]
        inverse, reps = _group(cols, [lv.cards[l] for lv, l in zip(self.levels, levels)])
        sizes = np.bincount(inverse, weights=base.sizes, minlength=len(reps[0]) if reps else 1).astype(np.int64)
        classes = inverse[base.classes] if self.eager and base.classes is not None else None
        return Part(levels, classes, sizes, reps)

    def classes(self, part: Part) -> np.ndarray:
        """Per-record class ids of ``part``. Class ids are canonical (the order of the classes'
        label-code tuples), so a partition computed lazily from any base can be completed
        from the bottom node."""
        if part.classes is None:
            cols = [self.up(i, 0, l)[self.bottom.reps[i]] for i, l in enumerate(part.levels)]
            inverse, _ = _group(cols, [lv.cards[l] for lv, l in zip(self.levels, part.levels)])
            part.classes = inverse[self.bottom.classes]
        return part.classes

    def need_classes(self) -> None:
        """From now on compute per-record class ids eagerly (a gather from the base), and drop
        cached partitions without them."""
        if not self.eager:
            self.eager = True
            keep = [j for j, p in enumerate(self._cache) if p.classes is not None]
            self._cache = [self._cache[j] for j in keep]
            self._cache_levels[: len(keep)] = self._cache_levels[keep]
            self._cache_sizes[: len(keep)] = self._cache_sizes[keep]
            self._next = len(keep)
            self._anchors.clear()

    def published(self, levels: tuple[int, ...], dictionary: bool = False) -> list[pa.Array]:
        """Each QI generalized to its level (hierarchy labels as text; with ``dictionary``,
        dictionary-encoded: a small integer per record, the labels once)."""
        if dictionary:
            return [pa.DictionaryArray.from_arrays(pa.array(lv.codes[l][r].astype(np.int32)), lv.labels[l])
                    for lv, l, r in zip(self.levels, levels, self.rows)]
        return [lv.labels[l].take(pa.array(lv.codes[l][r])) for lv, l, r in zip(self.levels, levels, self.rows)]

    def describe(self, levels: tuple[int, ...] | np.ndarray) -> str:
        return "[" + ", ".join(f"{q}={int(l)}" for q, l in zip(self.quasi, levels)) + "]"


@dataclass
class Verdict:
    ok: bool
    failing: int          # records in classes that fail the model
    classes: int
    value: float | None = None   # a satisfying node's exact loss, when the search prunes by a bound


class Scorer:
    """A built-in loss of nodes, from codes: ``bound`` holds every node's loss without
    suppression (flat, lattice order; a sum of d precomputed per-level means), and
    :meth:`value` a node's exact loss, the records of failing classes counting as fully
    generalized (width 1 on every QI). ``lower``: the bound is a lower bound of the exact loss,
    as the weights are >= 0 and the widths <= 1 (the search prunes by it only then)."""

    def __init__(self, space: Space, lm: LossModel) -> None:
        self.space = space
        self.lm = lm
        means = []
        for lv, widths, rows in zip(lm.levels, lm.widths, space.rows):
            means.append(np.array([np.average(widths[lvl][lv.codes[lvl][rows]], weights=space.weights)
                                   for lvl in range(lv.height + 1)]))
        bound = np.zeros(space.shape)
        for i, (w, m) in enumerate(zip(lm.weights, means)):
            shape = [1] * space.d
            shape[i] = len(m)
            bound = bound + w * m.reshape(shape)
        self.bound = bound.reshape(-1)
        # a suppressed record adds w_i * (1 - width) >= 0 on QI i (NaN fails both tests)
        self.lower = bool(all(float(w) >= 0.0 for w in lm.weights)
                          and all(bool(np.all(np.asarray(x) <= 1.0)) for widths in lm.widths for x in widths))

    def value(self, part: Part, ok: np.ndarray) -> float:
        """The exact loss of the node of ``part`` whose classes ``ok`` satisfy the model."""
        sp = self.space
        value = float(self.bound[int(np.dot(part.levels, _strides(sp.shape)))])
        if not ok.all():
            bad = np.flatnonzero(~ok)
            extra = 0.0
            for i, (w, widths) in enumerate(zip(self.lm.weights, self.lm.widths)):
                lvl = part.levels[i]
                extra += w * float((part.sizes[bad] * (1.0 - widths[lvl][part.reps[i][bad]])).sum())
            value += extra / sp.n
        return value


def _strides(shape: tuple[int, ...]) -> list[int]:
    """Flat-index strides of a C-ordered grid of ``shape`` (lattice order)."""
    return [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]


class Search:
    """Classify the nodes of ``space`` as satisfying or failing (Flash-style, see the module
    docstring). ``check(levels) -> Verdict``.

    ``bound``: per node (flat, lattice order) a lower bound of the exact value that the
    verdicts of satisfying nodes carry (``Verdict.value``). Once a check has found a
    satisfying node, a node whose bound is at least the least value found plus
    ``BOUND_MARGIN`` (:attr:`cut`) is *excluded*: no path starts there, and nodes still
    unclassified at the end are excluded (status 2), not classified. Paths then climb
    towards large down-sets (see :meth:`_next`). Without ``bound`` every node is classified."""

    def __init__(self, space: Space, check, monotone: bool, bound: np.ndarray | None = None) -> None:
        self.space = space
        self.check = check
        self.monotone = monotone
        # 0 unknown, 1 satisfying, -1 failing, 2 excluded by the bound (unclassified)
        self.status = np.zeros(space.shape, dtype=np.int8)
        self.flat = self.status.reshape(-1)
        self.verdicts: dict[int, Verdict] = {}
        self.strides = np.array(_strides(space.shape), dtype=np.int64)
        self._order()
        self.bound = bound
        #: least exact value of a checked satisfying node, and the bound that excludes a node
        self.best = math.inf
        self.cut = math.inf
        if bound is not None:
            #: nodes in each node's down-set (itself and its specializations)
            self.below = np.prod(self.grid.astype(np.int64) + 1, axis=0)

    def _order(self) -> None:
        """ARX's strategy: relative height, then mean relative level, then 1 - mean
        fraction of distinct values kept (more generalized last), then the node's index.
        Nodes are bucketed by height; a bucket is sorted only when the search reaches it,
        and only its nodes still unclassified then."""
        sp = self.space
        grid = np.indices(sp.shape, dtype=np.int16).reshape(sp.d, -1)
        self.grid = grid
        self.height = grid.sum(axis=0, dtype=np.int64)
        prec = np.zeros(sp.size)
        kept = np.zeros(sp.size)
        for i, lv in enumerate(sp.levels):
            prec += (np.arange(lv.height + 1) / max(lv.height, 1))[grid[i]]
            kept += (np.array(lv.cards, dtype=np.float64) / lv.cards[0])[grid[i]]
        self.prec = np.round(prec / sp.d, 12)
        self.kept = np.round(1 - kept / sp.d, 12)
        self.by_height = np.argsort(self.height, kind="stable")
        self.bounds = np.searchsorted(self.height[self.by_height], np.arange(int(sp.heights.sum()) + 2))

    def key(self, idx: int) -> tuple[int, float, float, int]:
        return (int(self.height[idx]), float(self.prec[idx]), float(self.kept[idx]), idx)

    def _buckets(self, unclassified_only: bool):
        for h in range(len(self.bounds) - 1):
            nodes = self.by_height[self.bounds[h]: self.bounds[h + 1]]
            if unclassified_only:
                nodes = nodes[self.flat[nodes] == 0]
            if nodes.size:
                yield nodes[np.lexsort((nodes, self.kept[nodes], self.prec[nodes]))]

    def levels(self, idx: int) -> tuple[int, ...]:
        return tuple(int(v) for v in self.grid[:, idx])

    def successors(self, idx: int) -> list[int]:
        lv = self.grid[:, idx]
        succ = [idx + int(self.strides[i]) for i in range(self.space.d) if lv[i] < self.space.heights[i]]
        return sorted(succ, key=self.key)

    def evaluate(self, idx: int) -> bool:
        v = self.check(self.levels(idx))
        self.verdicts[idx] = v
        lv = self.grid[:, idx]
        if not self.monotone:
            self.flat[idx] = 1 if v.ok else -1
        # monotone: every generalization of a satisfying node satisfies, every specialization
        # of a failing node fails (so no tag is ever overwritten with its opposite)
        elif v.ok:
            self.status[tuple(slice(int(x), None) for x in lv)] = 1
        else:
            self.status[tuple(slice(0, int(x) + 1) for x in lv)] = -1
        if v.ok and self.bound is not None and v.value is not None and v.value < self.best:
            self.best = v.value
            self.cut = v.value + BOUND_MARGIN
        return v.ok

    def excluded(self, idx: int) -> bool:
        """Whether the bound excludes ``idx``: it cannot beat or tie the best value found."""
        return self.bound is not None and bool(self.bound[idx] >= self.cut)

    def run(self) -> None:
        flat = self.flat
        if not self.monotone:
            if self.bound is None:
                for nodes in self._buckets(False):
                    for idx in nodes:
                        self.evaluate(int(idx))
                return
            # every node is checked on its own: in order of the bound, until it excludes the rest
            for idx in np.lexsort((np.arange(self.space.size), self.bound)):
                if self.excluded(int(idx)):
                    break
                self.evaluate(int(idx))
        else:
            for nodes in self._buckets(True):
                for idx in nodes:
                    if flat[idx] == 0 and not self.excluded(int(idx)):
                        self._binary(int(idx))
        if self.bound is not None:
            # each node left is excluded: it was when the search reached it, and the cut only falls
            flat[flat == 0] = 2

    def _next(self, current: int) -> int | None:
        """The next node of a path above ``current``: an unclassified direct generalization,
        the first in ARX's order. Once the bound excludes nodes, the one with the largest
        down-set among those the bound does not exclude (else among all; ties to the first
        in ARX's order): a path through the bulk of the nodes left to classify, whose failing
        nodes tag the most of them."""
        succ = [s for s in self.successors(current) if self.flat[s] == 0]
        if not succ or self.cut == math.inf:
            return succ[0] if succ else None
        within = [s for s in succ if not self.excluded(s)]
        below = self.below
        return max(within or succ, key=lambda s: below[s])

    def _path(self, head: int) -> list[int]:
        path = [head]
        current = head
        while True:
            nxt = self._next(current)
            if nxt is None:
                return path
            path.append(nxt)
            current = nxt

    def _binary(self, start: int) -> None:
        queue = [self.key(start)]
        while queue:
            head = heapq.heappop(queue)[-1]
            if self.flat[head] != 0 or self.excluded(head):
                continue
            path = self._path(head)
            low, high = 0, len(path) - 1
            while low <= high:
                mid = (low + high) // 2
                node = path[mid]
                if self.flat[node] != 0:
                    high = mid - 1
                    continue
                if self.evaluate(node):
                    high = mid - 1
                else:
                    for s in self.successors(node):
                        if self.flat[s] == 0:
                            heapq.heappush(queue, self.key(s))
                    low = mid + 1

    def minimal(self) -> np.ndarray:
        """Boolean grid: satisfying nodes none of whose direct specializations satisfy."""
        sat = self.status == 1
        below = np.zeros_like(sat)
        for axis in range(self.space.d):
            src = [slice(None)] * self.space.d
            dst = [slice(None)] * self.space.d
            src[axis] = slice(0, -1)
            dst[axis] = slice(1, None)
            below[tuple(dst)] |= sat[tuple(src)]
        return sat & ~below


def node_output(space: "Space", quasi: list[str], levels: tuple[int, ...], ok: np.ndarray, classes: np.ndarray,
                kept: np.ndarray, columns: list[str]) -> tuple[dict[str, pa.Array], str]:
    """What a node publishes: the generalized quasi-identifiers and ``_class`` (the classes
    ``ok`` numbered from 0 in order, null for a record not ``kept``), and the SELECT list that
    takes them from ``g`` and the table's other ``columns`` from ``t``."""
    new_id = np.cumsum(ok) - 1
    gen = dict(zip(quasi, space.published(levels, dictionary=True)))
    gen[CLASS] = pa.array(new_id[classes], mask=~kept, type=pa.int64())
    select = ", ".join(f"g.{sql_ident(c)}" if c in gen else f"t.{sql_ident(c)}" for c in columns if c != CLASS)
    return gen, select
