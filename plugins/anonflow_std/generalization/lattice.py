"""Optimal full-domain generalization over a lattice of hierarchy levels (SPEC section 6).

A node is a vector of hierarchy levels, one per quasi-identifier (QI); applying it replaces
every QI value by its ancestor at that level. The search finds every *minimal* node that
satisfies a privacy model (a check plugin implementing ``Metric.partition_holds``) within a
record-suppression limit, then picks the node of least utility loss.

Search (after Flash, Kohlmayer et al. 2012, as in ARX): the nodes are visited level by level
(sum of levels), each level's nodes ordered by ARX's strategy (relative height, mean
relative generalization, then the fraction of distinct values kept). From each node not yet
classified, a greedy path leads upwards through unclassified nodes (always to the best
successor in that order); a binary search on the path checks nodes, and each check tags
the lattice predictively: a satisfying node tags all its generalizations satisfying, a
failing node tags all its specializations failing, and a failing node's unclassified
successors are queued as new path heads. At the end every node is classified, having
checked only a fraction of them. Tagging needs monotonicity: the model must hold for a
class merged from satisfying classes (``Metric.monotone``), and, with suppression, for any
class containing a satisfying class (``Metric.monotone_with_suppression``; true for
k-anonymity and distinct l-diversity, false for (alpha,k)-anonymity). A model that is not
monotone in this sense is checked on every node (but see the loss bound below).

Checking a node never reads the table again: each QI's values are coded once as hierarchy
rows, and each level as integer label codes. The bottom node's classes are the distinct
code tuples; any other node's classes are computed from an already evaluated node below it
(the one with the fewest classes, from a small cache) by mapping each class's label codes
one level up through lookup arrays, combining them into one mixed-radix int64 key and
grouping (a dense bincount when the key space is small, else a sort). Class sizes are
bincounts, and the privacy check is vectorized over classes.

Utility: ``loss``, ``entropy-loss``, ``mi-loss`` and ``generalization-rl`` score a node from
codes alone (the mean width of each QI at each level is precomputed, so a node's loss
without suppression is a sum of d numbers; records of failing classes are suppressed and
count as fully generalized, width 1, on every QI). Without suppression the best node is
the minimal satisfying node of least loss (loss grows along generalization). With
suppression loss is not monotone, so every satisfying node is a candidate. Any other
metric plugin is computed on the materialized output of each minimal satisfying node (or,
with ``candidates: satisfying``, of every satisfying node).

Pruning by the loss bound (with suppression and a built-in loss; after ARX): a node's loss
without suppression, ``bound``, is a lower bound of its loss: a suppressed record counts
w_i * 1 on QI i where it would count w_i * width, and every width is <= 1 and every weight
w_i >= 0 (checked on the utility's widths and weights at run time: a loss that fails this
test is not pruned; the four built-in ones pass -- Iyengar and RL widths are fractions of a
domain, the weights 1/d, entropies, clipped mutual informations and RL domain shares,
normalized). The check of a satisfying node also computes its exact loss. Once one is
known, a node whose bound is at least the least exact loss found so far plus
``BOUND_MARGIN`` (1e-9) is *excluded*: its loss can neither beat that node's nor tie it.
No path starts at an excluded node, and the nodes still unclassified when the search ends
are excluded rather than classified (the bound grows along generalization for hierarchies
whose labels nest, so an excluded node's generalizations are excluded too; correctness
needs only each node's own bound). A binary search may still check an excluded node on a
path leading out of the bound: its failing verdict tags the nodes within the bound below
it, and such nodes, higher up, are cheaper to check than the ones within the bound. Once a
loss is known, a path climbs to the unclassified successor within the bound with the
largest down-set (the product of levels + 1; else to the one with the largest down-set
outside it; ties in ARX's order), so its failing nodes tag as many of the nodes left to
classify as possible. A model that is not monotone is checked node by node in order of the
bound (then lattice order), until the bound excludes the rest.

The choice with suppression visits the satisfying nodes in order of the bound (rounded to
12 decimals), then height, then lattice order, and takes each one's exact loss (from its
check, or computed for a node tagged satisfying) until the bound reaches the best loss
less 1e-12; a node replaces the best only when its loss is more than 1e-12 below it (ties
to the earlier node). Every satisfying node whose bound is below the optimum plus 1e-9 is
classified, and every excluded node's bound is at least the optimum plus 1e-9, so the visit
ends before the first excluded node (an internal error otherwise): the chosen node, its loss
and the published table are exactly those of the search without the bound
(``PRUNE = False``), at a fraction of the checks.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import math
import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import (CLASS, ROW, Algorithm, InputError, Metric, Param, ParamError, Partition, RunError,
                          StepContext, TypedTable, Typing, mark_generalized, sql_ident, suppression_limit,
                          validate_params)

from .. import __version__
from ..common.hierarchy_levels import HierarchyLoss, Levels, LossModel, need_hierarchies

#: evaluated partitions kept to roll coarser nodes up from.
CACHE = 48
#: anchor partitions (nodes with every level 0 or 1) kept to roll nodes up from.
ANCHORS = 64
#: search a frequency table (distinct QI and sensitive combinations with their records)
#: when the model and the utility allow it (off: one row per record, for comparison)
FREQUENCY = True
#: largest key space grouped by a dense bincount instead of a sort (times the rows grouped).
DENSE_FACTOR = 4
#: a node whose lower bound is this far above the best exact loss found can neither beat nor
#: tie it (the choice's ties are 1e-12; it orders bounds rounded to 12 decimals)
BOUND_MARGIN = 1e-9
#: prune the search by the loss bound (with suppression and a built-in loss; module
#: docstring); False gives the search without it (every node classified), for comparison
PRUNE = True


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
class _Part:
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
        self.bottom = _Part(tuple([0] * self.d), inverse, sizes, reps)
        self._cache: list[_Part] = []
        self._cache_levels = np.zeros((CACHE, self.d), dtype=np.int64)
        self._cache_sizes = np.zeros(CACHE, dtype=np.int64)
        self._next = 0
        self._anchors: dict[tuple[int, ...], _Part] = {}
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

    def population_sizes(self, part: _Part) -> np.ndarray:
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

    def partition(self, levels: tuple[int, ...]) -> _Part:
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

    def _rollup(self, base: _Part, levels: tuple[int, ...]) -> _Part:
        cols = [base.reps[i] if base.levels[i] == levels[i] else self.up(i, base.levels[i], levels[i])[base.reps[i]]
                for i in range(self.d)]
        inverse, reps = _group(cols, [lv.cards[l] for lv, l in zip(self.levels, levels)])
        sizes = np.bincount(inverse, weights=base.sizes, minlength=len(reps[0]) if reps else 1).astype(np.int64)
        classes = inverse[base.classes] if self.eager and base.classes is not None else None
        return _Part(levels, classes, sizes, reps)

    def classes(self, part: _Part) -> np.ndarray:
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


class _Scorer:
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

    def value(self, part: _Part, ok: np.ndarray) -> float:
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


class Lattice(Algorithm):
    name = "lattice"
    version = __version__
    #: records of failing classes are suppressed, at most ``suppression`` of them (its cap)
    suppresses = True
    suppression_param = "suppression"
    description = ("Optimal full-domain generalization (SPEC section 6): every minimal hierarchy-level node "
                   "satisfying a privacy model (Flash-style search with predictive tagging), best by a utility "
                   "metric; optional record suppression.")
    params = (
        Param("model", "str", default="k-anonymity",
              help="privacy check implementing partition_holds (k-anonymity, l-diversity, alpha-k-anonymity, ...)"),
        Param("model_params", "dict", default={}, help="the model's parameters, e.g. {k: 5}"),
        Param("suppression", "float", default=0.0, min=0.0, max=1.0,
              help="largest fraction of records that may be suppressed (records of failing classes)"),
        Param("utility", "str", default="loss",
              help="metric choosing among satisfying nodes: loss, entropy-loss, mi-loss, generalization-rl, or any"),
        Param("utility_params", "dict", default={}, help="parameters of the utility metric, e.g. {label: income}"),
        Param("maximize", "bool", default=False,
              help="for a metric other than the built-in losses: higher is better"),
        Param("candidates", "str", default="minimal", choices=("minimal", "satisfying"),
              help="for a metric other than the built-in losses: score the minimal satisfying nodes, or every "
                   "satisfying node (with suppression a coarser node may suppress fewer records and score better)"),
    )

    #: the registry this lattice is registered in (:meth:`bound`): its privacy models and
    #: utility metrics are looked up there
    registry: Any = None

    def bound(self, registry: Any) -> "Lattice":
        """This lattice, for the registry ``registry`` (``anonflow_register_algorithms``)."""
        lattice = copy.copy(self)
        lattice.registry = registry
        return lattice

    # -- parameters -------------------------------------------------------------------

    def _registry(self) -> Any:
        if self.registry is None:
            raise RunError("lattice: this lattice is not registered in a plugin registry, where its privacy models "
                           "are looked up; use the registered one (registry.get('algorithm', 'lattice').obj)")
        return self.registry

    def _model(self, params: Mapping[str, Any]) -> tuple[Metric, dict[str, Any]]:
        reg = self._registry()
        name = params["model"]
        if not reg.has("metric", name):
            known = [n for n in reg.names("metric") if _offers_partition(reg.get("metric", n).obj)]
            raise InputError(f"lattice: unknown privacy model {name!r}; models the lattice can search: "
                             f"{', '.join(known) or 'none'}")
        obj = reg.get("metric", name).obj
        if obj.category != "privacy" or not _offers_partition(obj):
            known = [n for n in reg.names("metric") if _offers_partition(reg.get("metric", n).obj)]
            raise InputError(f"lattice: metric {name!r} is not a privacy check the lattice can search (it needs "
                             f"partition_holds); models: {', '.join(known) or 'none'}")
        try:
            mparams = validate_params(obj.params, params["model_params"] or {})
        except ParamError as exc:
            raise InputError(f"lattice: model_params of {name!r}: {exc}") from None
        return obj, mparams

    def _utility(self, params: Mapping[str, Any]) -> tuple[Metric, dict[str, Any]]:
        reg = self._registry()
        name = params["utility"]
        if not reg.has("metric", name):
            raise InputError(f"lattice: unknown utility metric {name!r}; e.g. loss, entropy-loss, mi-loss, "
                             "generalization-rl")
        obj = reg.get("metric", name).obj
        try:
            uparams = validate_params(obj.params, params["utility_params"] or {})
        except ParamError as exc:
            raise InputError(f"lattice: utility_params of {name!r}: {exc}") from None
        return obj, uparams

    def references(self, params: Mapping[str, Any]) -> list[str]:
        """The model's parameters of kind ``step`` (delta-presence's and k-map's
        ``population``): the search reads that table, so the step depends on it."""
        reg = self.registry
        name = params.get("model", "k-anonymity")
        given = params.get("model_params") or {}
        if reg is None or not isinstance(name, str) or not reg.has("metric", name) or not isinstance(given, Mapping):
            return []
        return [str(given[p.name]) for p in reg.get("metric", name).obj.params
                if p.kind == "step" and isinstance(given.get(p.name), str)]

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        try:
            _, mparams = self._model(params)
        except InputError:
            return {}
        return {params["model"]: {k: v for k, v in mparams.items() if v is not None}}

    def check(self, params: Mapping[str, Any], table: TypedTable | None = None, **tables: TypedTable) -> None:
        self._model(params)
        utility, uparams = self._utility(params)
        if table is None:
            return
        quasi = table.typing.quasi
        need_hierarchies(quasi, table.hierarchies, "lattice")
        if table.num_rows == 0:
            raise InputError("lattice: the table has no records")
        if isinstance(utility, HierarchyLoss):
            utility.model(table, uparams)

    def describe_plan(self, params: Mapping[str, Any], table: TypedTable) -> list[str]:
        quasi = table.typing.quasi
        shape = [Levels(table.hierarchies[q]).height + 1 for q in quasi]
        size = math.prod(shape)
        _, mparams = self._model(params)
        shown = ", ".join(f"{k}={v}" for k, v in mparams.items() if v is not None)
        limit = suppression_limit(params["suppression"], table.num_rows)
        return [f"lattice: {size:,} nodes ({' x '.join(map(str, shape))} levels over {', '.join(quasi)})",
                f"searches {table.num_rows:,} records for {params['model']} ({shown}), at most {limit:,} "
                f"suppressed; best by {params['utility']}"]

    # -- the run ----------------------------------------------------------------------

    #: one full-domain generalization of the whole table: never a node per fragment
    per_fragment = False

    def summarizes(self, params: Mapping[str, Any]) -> bool:
        """On a partitioned table: each fragment's frequency table where it lies, summed (the
        search needs nothing else) -- when the search runs on the frequency table at all."""
        model, _ = self._model(params)
        utility, _ = self._utility(params)
        return bool(FREQUENCY and model.weighted_partitions and isinstance(utility, HierarchyLoss))

    def summarize(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> pa.Table:
        _, mparams = self._model(params)
        return ctx.sql(_frequency_query(table, mparams, ordered=False), t=table)

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        t0 = time.perf_counter()
        model, mparams = self._model(params)
        utility, uparams = self._utility(params)
        quasi = table.typing.quasi
        need_hierarchies(quasi, table.hierarchies, "lattice")
        # a built-in loss with a check that counts through the partition's counts: search the
        # frequency table (each distinct QI and sensitive combination once, with its records),
        # which DuckDB computes, instead of one row per record
        units = _frequency_table(table, model, mparams, ctx) if self.summarizes(params) else None
        if units is not None:
            unit_table, weights = units
            space = Space(unit_table, quasi, weights)
        else:
            space = Space(table, quasi)
        n = space.n
        limit = suppression_limit(params["suppression"], n)
        cache: dict[str, Any] = {}

        population = _population_step(model, mparams)
        if population is not None:
            space.set_population(ctx.table(population), population)

        def holds(part: _Part) -> np.ndarray:
            pop = (lambda: space.population_sizes(part)) if space.has_population else None
            partition = Partition(lambda: space.classes(part), part.sizes, space.table, cache, space.weights, pop)
            ok = np.asarray(model.partition_holds(partition, mparams))
            if partition.classes_used:
                space.need_classes()
            if ok.shape != part.sizes.shape or ok.dtype != np.bool_:
                raise RunError(f"privacy model {model.name!r}: partition_holds returned {ok.dtype} of shape "
                               f"{ok.shape}, expected one bool per class ({part.sizes.shape[0]})")
            return ok

        # progress: nodes resolved (checked, or tagged by monotonicity), counted at most every 0.2 s
        advance = ctx.progress(space.size, "lattice nodes")
        shown = [0, time.perf_counter()]

        # with suppression a built-in loss is not monotone: every satisfying node is a candidate,
        # and the search skips the nodes whose loss without suppression (a lower bound) is above
        # the best exact loss it has found (see the module docstring)
        scorer = _Scorer(space, utility.model(table, uparams)) \
            if limit > 0 and isinstance(utility, HierarchyLoss) else None
        prune = PRUNE and scorer is not None and scorer.lower
        if scorer is not None and not scorer.lower:
            ctx.note(f"lattice: {utility.name!r} has a weight below 0 or a width above 1, so its loss without "
                     "suppression is no lower bound of its loss; the search is not pruned by it")

        def check(levels: tuple[int, ...]) -> Verdict:
            part = space.partition(levels)
            ok = holds(part)
            failing = int(part.sizes[~ok].sum())
            now = time.perf_counter()
            if now - shown[1] >= 0.2:
                resolved = int(np.count_nonzero(search.flat))
                advance(resolved - shown[0])
                shown[:] = [resolved, now]
            value = scorer.value(part, ok) if prune and failing <= limit else None
            return Verdict(failing <= limit, failing, len(part.sizes), value)

        monotone = bool(model.monotone and (limit == 0 or model.monotone_with_suppression))
        search = Search(space, check, monotone, scorer.bound if prune else None)
        search.run()
        advance(space.size - shown[0])
        checked = len(search.verdicts)
        excluded = int(np.count_nonzero(search.flat == 2))
        t_search = time.perf_counter() - t0
        if not monotone:
            why = "" if not model.monotone else " once records may be suppressed"
            which = f"every one of the {space.size} nodes was checked" if not excluded else \
                f"every node the loss bound did not exclude was checked ({checked} of {space.size})"
            ctx.note(f"lattice: {model.name!r} is not monotone under generalization{why}; {which}")

        sat = search.status == 1
        if not sat.any():
            raise InputError(self._no_node(space, search, model, mparams, params["suppression"], limit, holds,
                                           ctx.step))
        minimal = np.flatnonzero(search.minimal().reshape(-1))

        if isinstance(utility, HierarchyLoss):
            best, value, evaluated = self._best_loss(space, search, scorer or _Scorer(space, utility.model(
                table, uparams)), minimal, limit, holds)
        else:
            cand = minimal if params["candidates"] == "minimal" else np.flatnonzero(sat.reshape(-1))
            # ties go to the lower node (fewer levels), then the first in lattice order
            cand = cand[np.lexsort((cand, search.height[cand]))]
            best, value, evaluated = self._best_metric(space, search, cand, holds, table, utility, uparams,
                                                       params["maximize"], ctx)
        levels = search.levels(best)
        part = space.partition(levels)
        ok = holds(part)
        classes = space.classes(part)
        kept = ok[classes]
        new_id = np.cumsum(ok) - 1
        class_ids = pa.array(new_id[classes], mask=~kept, type=pa.int64())
        # the published table is written by the store: the generalized QIs and the classes,
        # joined by position to the columns the node leaves as they are, or (frequency table)
        # joined to the records by their QI values
        gen = dict(zip(quasi, space.published(levels, dictionary=True)))
        gen[CLASS] = class_ids
        cols = [c for c in table.columns if c != CLASS]
        select = ", ".join(f"g.{sql_ident(c)}" if c in gen else f"t.{sql_ident(c)}" for c in cols)
        if units is None:
            out = ctx.derive(f"SELECT {select}, g.{sql_ident(CLASS)} FROM base t POSITIONAL JOIN gen g",
                             base=table, gen=pa.table(gen))
        else:
            # each record meets exactly one row of the frequency table: the one of its values
            keyed = unit_table.columns
            keys = {f"_af_key{i}": unit_table.column(c) for i, c in enumerate(keyed)}
            on = " AND ".join(f"t.{sql_ident(c)} IS NOT DISTINCT FROM g._af_key{i}" for i, c in enumerate(keyed))
            out = ctx.derive(f"SELECT {select}, g.{sql_ident(CLASS)} FROM base t JOIN gen g ON {on}",
                             ordered=False, base=table, gen=pa.table({**keys, **gen}))
        suppressed = int(part.sizes[~ok].sum())

        if excluded:
            found = (f"{space.size - checked - excluded} by predictive tagging and {excluded} by the loss bound "
                     f"(loss without suppression above the best found); {int(sat.sum())} known to satisfy "
                     f"{model.name}, {len(minimal)} of them minimal")
        else:
            found = (f"{space.size - checked} by predictive tagging; {int(sat.sum())} satisfy {model.name}, "
                     f"{len(minimal)} of them minimal")
        ctx.note(f"lattice: {space.size} nodes ({' x '.join(map(str, space.shape))} levels over "
                 f"{', '.join(quasi)}); checked {checked}, pruned {found}; search {t_search:.2f} s")
        ctx.note(f"lattice: chosen node {space.describe(levels)} with {utility.name} = {value:.6g} "
                 f"({evaluated} node(s) scored); {int(ok.sum())} classes, {suppressed} record(s) suppressed "
                 f"(limit {limit})")
        # the node, for anonflow apply: the release carries it (several levels may hold the same labels)
        ctx.record_fitted("node", {"quasi": list(quasi), "levels": [int(lv) for lv in levels]})
        claims = {model.name: {k: v for k, v in mparams.items() if v is not None}}
        return TypedTable(None, published_typing(table.typing, quasi), claims, table.hierarchies, stored=out.stored)

    # -- applying the published node to new data (anonflow apply) ---------------------

    def apply(self, table: TypedTable, published: TypedTable, params: Mapping[str, Any], ctx: StepContext,
              fitted: Mapping[str, Any] | None = None) -> tuple[TypedTable, dict[str, Any]]:
        """Generalize the new records ``table`` (typed, with the recorded hierarchies) with the
        node the run chose, as it recorded it (``fitted["node"]``: :func:`recorded_levels`,
        checked against the published labels). A release made before anonflow recorded the
        node: each quasi-identifier to the level whose labels its published values are
        (:func:`published_levels`), with a note. A record whose labels are those of a
        published class gets that class's ``_class``; other label tuples get new ids after
        the release's largest, in the order of their labels. Nothing is checked here: the
        caller re-checks the claimed model on the result."""
        quasi = list(table.typing.quasi)
        need_hierarchies(quasi, table.hierarchies, "lattice")
        recorded = (fitted or {}).get("node")
        if recorded is not None:
            levels = recorded_levels(recorded, published, quasi, table.hierarchies)
            source = "recorded"
        else:
            levels = published_levels(published, quasi, table.hierarchies)
            source = "published labels"
            ctx.note("lattice: the release records no node (made before anonflow recorded it): the node was read off "
                     "the published labels")
        data = table.data
        for q in quasi:
            h = table.hierarchies[q]
            h.check_covers(data.column(q), "apply", str(q))
            data = data.set_column(data.column_names.index(q), q, h.generalize(data.column(q), levels[q]))
        drop = [c for c in (CLASS, ROW) if c in data.column_names]
        data = data.drop_columns(drop)
        # each record's class, in DuckDB: the release's class of its label tuple, or a new id
        # after the release's largest, new tuples numbered in the order of their labels
        cols = [f"_q{i}" for i in range(len(quasi))]
        keys = published.data.select(quasi + [CLASS]).group_by(quasi).aggregate([(CLASS, "min")])
        known = pa.table({**{c: keys.column(q) for c, q in zip(cols, quasi)}, "_id": keys.column(f"{CLASS}_min")})
        batch = pa.table({**{c: data.column(q) for c, q in zip(cols, quasi)},
                          "_pos": pa.array(np.arange(data.num_rows, dtype=np.int64))})
        def same(x: str, y: str) -> str:
            return " AND ".join(f"{x}.{c} IS NOT DISTINCT FROM {y}.{c}" for c in cols) or "true"

        label = ", ".join(f"coalesce(CAST({c} AS VARCHAR), '')" for c in cols) or "1"
        sel = ", ".join(cols)
        ids = ctx.sql(f"""
            WITH fresh AS (SELECT DISTINCT {sel} FROM b WHERE NOT EXISTS (SELECT 1 FROM k WHERE {same('b', 'k')})),
                 numbered AS (SELECT {sel}, (SELECT coalesce(max(_id), -1) FROM k)
                                            + row_number() OVER (ORDER BY {label}) AS _id FROM fresh),
                 every AS (SELECT {sel}, _id, true AS _known FROM k
                           UNION ALL SELECT {sel}, _id, false FROM numbered)
            SELECT b._pos, e._id, e._known FROM b JOIN every e ON {same('b', 'e')}
            ORDER BY b._pos""", b=batch, k=known)
        if ids.num_rows != data.num_rows:  # every label tuple has exactly one id
            raise RunError(f"lattice apply: {ids.num_rows} class ids for {data.num_rows} records")
        class_ids = ids.column("_id").to_numpy().astype(np.int64)
        data = data.append_column(CLASS, pa.array(class_ids, type=pa.int64()))
        node = {q: int(levels[q]) for q in quasi}
        used, first = np.unique(class_ids, return_index=True)
        in_release = int(ids.column("_known").to_numpy(zero_copy_only=False)[first].sum())
        fresh = int(used.size) - in_release
        ctx.note(f"lattice: node [{', '.join(f'{q}={l}' for q, l in node.items())}] applied to {data.num_rows} "
                 f"record(s): {used.size} class(es), {in_release} of them published in the release, {fresh} new")
        out = TypedTable(data, published_typing(table.typing, quasi), published.claims, table.hierarchies)
        return out, {"node": node, "node_from": source, "classes": int(used.size),
                     "release_classes": in_release, "new_classes": fresh}

    # -- choosing the node --------------------------------------------------------------

    def _no_node(self, space: Space, search: Search, model: Metric, mparams: Mapping[str, Any],
                 suppression: float, limit: int, holds, step: str) -> str:
        """The one-line error when no node satisfies the model: why (a model parameter no node
        can meet, see :func:`_unreachable`), the least violating node, and what to change."""
        # fewest records in failing classes; ties to the most generalized node (for a monotone
        # model the closest to satisfying), then the first in lattice order
        idx = min(search.verdicts, key=lambda i: (search.verdicts[i].failing, -int(search.grid[:, i].sum()), i))
        v = search.verdicts[idx]
        n = space.n
        shown = ", ".join(f"{k}={val}" for k, val in mparams.items() if val is not None)
        allowed = "with no record suppressed" if limit == 0 else \
            f"with at most {suppression:.4g} of the records ({limit}) suppressed"
        why = _unreachable(space, model, mparams, holds, limit)
        text = f"lattice: no node satisfies {model.name} ({shown}) {allowed}"
        if why:
            text += ": " + "; ".join(why)
        text += (f"; the least violating node {space.describe(search.levels(idx))} leaves {v.failing} of {n} "
                 "records in failing classes")
        if v.failing < n:
            need = min(math.ceil(v.failing / n * 100 - 1e-9) / 100, 1.0)
            while need < 1.0 and suppression_limit(need, n) < v.failing:
                need = min(round(need + 0.01, 2), 1.0)
            text += (f": it would suppress {v.failing} records, the cap allows {limit} (suppression = "
                     f"{suppression:g}); raise it, e.g. --set {step}.suppression={need:g}, or relax the model")
        else:
            text += "; no suppression allowance can help: relax the model"
        return text

    def _best_loss(self, space: Space, search: Search, scorer: _Scorer, minimal: np.ndarray, limit: int,
                   holds) -> tuple[int, float, int]:
        """Least-loss satisfying node (loss computed from codes; see module docstring)."""
        bound = scorer.bound
        heights = search.height
        if limit == 0:
            cand = minimal
            order = np.lexsort((cand, heights[cand], np.round(bound[cand], 12)))
            best = int(cand[order[0]])
            return best, float(bound[best]), len(cand)
        # every satisfying node in order of its bound, scored exactly until the bound reaches the
        # best: a node excluded by the search's bound always lies past that point
        flat = search.flat
        cand = np.flatnonzero((flat == 1) | (flat == 2))
        order = cand[np.lexsort((cand, heights[cand], np.round(bound[cand], 12)))]
        best, best_value, evaluated = -1, np.inf, 0
        for idx in order:
            idx = int(idx)
            if bound[idx] >= best_value - 1e-12:
                break
            if flat[idx] == 2:
                raise RunError(f"lattice: internal error: node {space.describe(search.levels(idx))}, excluded by "
                               f"its loss bound {bound[idx]:.17g}, is needed by the choice (best {best_value:.17g})")
            v = search.verdicts.get(idx)
            if v is not None and v.value is not None:
                value = v.value
            else:
                part = space.partition(search.levels(idx))
                value = scorer.value(part, holds(part))
                evaluated += 1
            if value < best_value - 1e-12:
                best, best_value = idx, value
        return best, best_value, evaluated

    def _best_metric(self, space: Space, search: Search, candidates: np.ndarray, holds, table: TypedTable,
                     utility: Metric, uparams: Mapping[str, Any], maximize: bool,
                     ctx: StepContext) -> tuple[int, float, int]:
        """Materialize each candidate node and score it with ``utility`` (the first best wins)."""
        best, best_value = -1, None
        for idx in candidates:
            levels = search.levels(int(idx))
            part = space.partition(levels)
            ok = holds(part)
            classes = space.classes(part)
            keep = pa.array(ok[classes])
            data = table.data
            for q, arr in zip(space.quasi, space.published(levels)):
                data = data.set_column(data.column_names.index(q), q, arr)
            new_id = np.cumsum(ok) - 1
            data = data.append_column(CLASS, pa.array(new_id[classes], type=pa.int64()))
            anonymized = table.replace(data=data.filter(keep), typing=published_typing(table.typing, space.quasi))
            # as an evaluate step with [original, anonymized] does: every metric gets the original
            original = table.replace(data=table.data.filter(keep))
            node_ctx = dataclasses.replace(ctx, suppressed=int(space.n - part.sizes[ok].sum()))
            try:
                result = utility.compute(original, anonymized, uparams, node_ctx)
            except InputError:
                raise
            except Exception as exc:  # a third party's crash: say whose
                raise RunError(f"lattice: utility metric {utility.name!r} failed on node {space.describe(levels)}: "
                               f"{type(exc).__name__}: {exc}") from exc
            if utility.name not in result:
                raise RunError(f"lattice: utility metric {utility.name!r} returned no value named {utility.name!r}")
            # a metric that counts suppressed records (ctx.suppressed) is compared on that value,
            # so a node cannot win by suppressing the records it would represent badly
            value = float(result.get(f"{utility.name}.with_suppressed", result[utility.name]))
            # values equal up to rounding tie (the earlier candidate, the lower node, keeps it): two
            # nodes of exactly equal value can come out a few ulps apart from different summations
            slack = 1e-12 * max(1.0, abs(best_value)) if best_value is not None else 0.0
            better = best_value is None or (value > best_value + slack if maximize else value < best_value - slack)
            if better:
                best, best_value = int(idx), value
        return best, float(best_value), len(candidates)


def recorded_levels(recorded: Any, published: TypedTable, quasi: list[str],
                    hierarchies: Mapping[str, Any]) -> dict[str, int]:
    """The node a run recorded (``{"quasi": [names], "levels": [level per name]}``), per
    quasi-identifier: it must name exactly ``quasi``, each level must be one of its
    hierarchy, and the published values must be labels of that level (else the hierarchy
    is not the release's, or the node is not its table's); one-line errors."""
    try:
        names = [str(q) for q in recorded["quasi"]]
        levels = [int(lv) for lv in recorded["levels"]]
        ok = len(names) == len(levels) == len(set(names)) and all(
            isinstance(lv, int) and not isinstance(lv, bool) for lv in recorded["levels"])
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError("lattice: the release's recorded node is not {quasi, levels} of equal length")
    if sorted(names) != sorted(quasi):
        raise InputError(f"lattice: the release's recorded node is over {', '.join(names)}, not over the "
                         f"quasi-identifiers {', '.join(quasi)}")
    node = dict(zip(names, levels))
    out: dict[str, int] = {}
    for q in quasi:
        h, lv = hierarchies[q], node[q]
        if not 0 <= lv <= h.height:
            raise InputError(f"lattice: the release's recorded node has level {lv} for {q!r}, whose hierarchy has "
                             f"levels 0..{h.height}")
        if q not in published.columns:
            raise InputError(f"the release's published table has no column {q!r} (a quasi-identifier)")
        values = pa.chunked_array([published.data.column(q)]).combine_chunks()
        present = set(v for v in values.unique().to_pylist() if v is not None)
        stray = sorted(present - set(h.level(lv).to_pylist()), key=str)
        if stray:
            raise InputError(f"lattice: the published value {stray[0]!r} of {q!r} is not a label of the recorded "
                             f"level {lv} of its hierarchy: the hierarchy or the node is not the release's")
        out[q] = lv
    return out


def published_levels(published: TypedTable, quasi: list[str], hierarchies: Mapping[str, Any]) -> dict[str, int]:
    """The node of a published lattice table: for each quasi-identifier, the level of its
    hierarchy whose labels its published values are. For a release made before anonflow
    recorded the node (:func:`recorded_levels` reads a recorded one), it is read off the data: the levels whose labels
    include every published value are the candidates; when several are, they must
    generalize every value of the hierarchy alike (levels repeating one another), else the
    node cannot be told and the error says so (one line). A published value that is a label
    of no level: the hierarchy is not the release's."""
    levels: dict[str, int] = {}
    for q in quasi:
        h = hierarchies[q]
        values = pa.chunked_array([published.data.column(q)]).combine_chunks() if q in published.columns else None
        if values is None:
            raise InputError(f"the release's published table has no column {q!r} (a quasi-identifier)")
        present = set(v for v in values.unique().to_pylist() if v is not None)
        candidates = [lv for lv in range(h.height + 1) if present <= set(h.level(lv).to_pylist())]
        if not candidates:
            level_sets = [set(h.level(lv).to_pylist()) for lv in range(h.height + 1)]
            stray = sorted(v for v in present if not any(v in s for s in level_sets))
            what = (f"the published value {stray[0]!r} is a label of no level" if stray else
                    "no single level holds all its published values")
            raise InputError(f"lattice: the hierarchy of {q!r} is not the one the release was made with: {what}")
        first = h.level(candidates[0])
        differ = [lv for lv in candidates[1:] if not h.level(lv).equals(first)]
        if differ:
            raise InputError(f"lattice: cannot tell the node's level of {q!r} from the published values: levels "
                             f"{candidates[0]} and {differ[0]} of its hierarchy both hold them and generalize other "
                             "values differently")
        levels[q] = candidates[0]
    return levels


def published_typing(typing: Typing, quasi: list[str]) -> Typing:
    """The typing of a published node: each quasi-identifier holds labels of its hierarchy
    (``options["generalized"] = {"kind": "hierarchy"}``, :mod:`anonflow.generalization`),
    its role and type kept."""
    for q in quasi:
        typing = mark_generalized(typing, q, "hierarchy")
    return typing


def _frequency_query(table: TypedTable, mparams: Mapping[str, Any], ordered: bool = True) -> str:
    """The query of the frequency table over ``t``: the quasi-identifiers and the sensitive
    attributes (those typed, and one the model names), with ``_af_n`` records each."""
    keep = list(table.typing.quasi) + [c for c in table.typing.sensitive if c not in table.typing.quasi]
    named = mparams.get("sensitive")
    if isinstance(named, str) and named in table.columns and named not in keep:
        keep.append(named)
    cols = ", ".join(sql_ident(c) for c in keep)
    return f"SELECT {cols}, count(*)::BIGINT AS _af_n FROM t GROUP BY ALL" + (" ORDER BY ALL NULLS LAST" if ordered else "")


def _frequency_table(table: TypedTable, model: Metric, mparams: Mapping[str, Any],
                     ctx: StepContext) -> tuple[TypedTable, np.ndarray]:
    """The records as a frequency table: each distinct combination of the quasi-identifiers
    and the sensitive attributes (those typed, and one the model names) once, in sorted order,
    with its number of records (DuckDB groups them where they are stored). On a partitioned
    table the engine has summed the fragments' frequency tables (:meth:`Lattice.summarize`)
    into ``ctx.summary``: the same table."""
    freq = ctx.summary if ctx.summary is not None else ctx.sql(_frequency_query(table, mparams), t=table)
    weights = freq.column("_af_n").to_numpy()
    units = TypedTable(freq.drop_columns(["_af_n"]), table.typing, {}, table.hierarchies)
    return units, weights


def _unreachable(space: Space, model: Metric, mparams: Mapping[str, Any], holds, limit: int) -> list[str]:
    """Why no node can satisfy the model, as far as it can be told from the data and the top
    node (every QI at its hierarchy's top level) -- each class of any node lies inside one
    class of the top node. Reads the usual parameters: ``k`` (class size), ``l`` / ``p``
    (distinct sensitive values per class), ``alpha`` and a grading's alpha_i (largest share of
    a value). Vectorized: one partition of the top node and one of the whole table."""
    from ..common.columns import sensitive_column

    n = space.n
    table = space.table
    top_levels = tuple(int(h) for h in space.heights)
    top = space.partition(top_levels)
    where = f"the top node {space.describe(top_levels)}"
    out: list[str] = []
    k = mparams.get("k")
    if isinstance(k, int) and not isinstance(k, bool) and not space.has_population:  # k-map: population counts
        if k > n:
            out.append(f"k = {k} is larger than the number of records ({n})")
        elif int(top.sizes.max()) < k:
            out.append(f"k = {k}, but the largest class of {where} has {int(top.sizes.max())} records "
                       "(a hierarchy does not generalize to one value)")
    try:
        s = sensitive_column(table, mparams.get("sensitive"), model.name) if table.typing.sensitive or \
            mparams.get("sensitive") else None
        if s is not None:
            out += _unreachable_sensitive(space, model, mparams, limit, s, top, where)
    except InputError:  # a column the model would reject anyway: its own check says so
        pass
    if not out:
        ok = holds(top)
        failing = int(top.sizes[~ok].sum())
        if failing and model.monotone_with_suppression:
            out.append(f"{where} leaves {failing} records in failing classes, and no finer node leaves fewer")
    return out


def _unreachable_sensitive(space: Space, model: Metric, mparams: Mapping[str, Any], limit: int, s: str, top: _Part,
                           where: str) -> list[str]:
    """:func:`_unreachable` for the parameters on the sensitive attribute ``s``: ``l`` / ``p``,
    ``alpha`` and a grading's alpha_i (a missing value is no value, as the models count)."""
    from ..common.columns import grading_of, real_counts, real_distinct

    n = space.n
    table = space.table
    single = len(top.sizes) == 1
    out: list[str] = []
    cache: dict[str, Any] = {}
    whole = Partition(np.zeros(table.num_rows, dtype=np.int64), np.array([n], dtype=np.int64), table, cache,
                      space.weights)
    distinct = int(real_distinct(whole, s)[0])  # a missing value is no value
    for key in ("l", "p"):
        want = mparams.get(key)
        if not isinstance(want, int) or isinstance(want, bool):
            continue
        if want > distinct:
            out.append(f"{key} = {want}, but {s!r} has only {distinct} distinct value(s) in the whole table")
        elif not single:
            most = int(real_distinct(Partition(lambda: space.classes(top), top.sizes, table, cache, space.weights),
                                         s).max())
            if most < want:
                out.append(f"{key} = {want}, but the classes of {where} hold at most {most} distinct value(s) "
                           f"of {s!r}")
    counts, real, values = real_counts(whole, s)
    counts = counts[0].astype(np.float64)
    m = int(real[0])  # the records with a real value: a value's share is over them
    names = [repr(v) for v in values]
    bound = None
    alpha = mparams.get("alpha")
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha > 0:
        bound = np.full(len(values), float(alpha))
    elif model.name == "alpha-i-k-anonymity":
        try:
            grading = grading_of(table, s, model.name)
            levels = grading.levels_of(pa.array(values, pa.string()))
        except InputError:
            levels = np.zeros(0, dtype=np.int64)
        if levels.size and (levels > 0).all():
            alphas = grading.alphas()
            if (mparams.get("per") or "value") == "value":
                bound = alphas[levels]
            else:  # per level: a level's values count together
                counts = np.bincount(levels, weights=counts, minlength=grading.size + 1)[1:]
                bound = alphas[1:]
                names = [f"level {i}" for i in range(1, grading.size + 1)]
    if bound is not None and m:
        if alpha is not None and math.ceil(1.0 / alpha - 1e-9) > distinct:
            out.append(f"alpha = {alpha:g} needs at least {math.ceil(1.0 / alpha - 1e-9)} distinct values of "
                       f"{s!r} in a class, but the whole table has {distinct}")
        else:
            # a value above its bound in the whole table is above it in some class of every
            # node: at least (c - a n) / (1 - a) records must go for the rest to satisfy it
            excess = np.where(bound < 1.0, (counts - bound * m) / np.maximum(1.0 - bound, 1e-12), 0.0)
            j = int(np.argmax(excess))
            least = int(math.ceil(excess[j] - 1e-9))
            if least > limit:
                out.append(f"{names[j]} is {counts[j] / m:.1%} of the records{'' if m == n else ' with a value'}, "
                           f"above its alpha {bound[j]:g}: every node must suppress at least {least} records")
    return out


def _population_step(model: Metric, mparams: Mapping[str, Any]) -> str | None:
    """The population table the model names (a parameter ``population`` of kind ``step``),
    or None: the search then gives its partitions population counts."""
    for p in model.params:
        if p.name == "population" and p.kind == "step" and isinstance(mparams.get(p.name), str):
            return str(mparams[p.name])
    return None


def _offers_partition(obj: Metric) -> bool:
    return type(obj).partition_holds is not Metric.partition_holds


PLUGINS = [Lattice()]
