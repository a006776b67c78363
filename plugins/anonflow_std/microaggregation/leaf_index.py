"""The Euclidean similarity of MDAV and V-MDAV (:class:`Euclidean`): the records in leaves of a
k-d split with centroid sums and radial lists, answering the loops' farthest and nearest
queries exactly (:class:`LeafIndex`; :mod:`.grey_similarity` builds on it).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

from .similarity import (FAR_LEAVES, FILTER_ABOVE, KD_FANOUT, LEAF_SIZE, MARGIN, NEAR_LEAVES, RADIAL_SORTED,
                         REBUILD_SCAN, SHRINK_EVERY, TINY, Best, Extender, FloatArray, Index, IntArray, Similarity)


class Euclidean(Similarity):
    """Euclidean distance: MDAV and V-MDAV."""

    name = "euclidean"

    def index(self, x: FloatArray) -> Index:
        return _EuclideanIndex(x)


class _CentroidSum:
    """The centroid of the remaining records as a running column sum.

    Records taken since the last query are subtracted in one sum at the next query; the
    sum is recomputed from scratch whenever the number of remaining records halves, so
    that rounding errors cannot accumulate.
    """

    def __init__(self, x: FloatArray, alive: NDArray[np.bool_]) -> None:
        self.x = x
        self.alive = alive
        self.remaining = x.shape[0]
        self.col_sum = x.sum(axis=0)
        self.resum_at = self.remaining // 2
        self.unsummed: list[IntArray] = []
        self.resummed = False

    def commit(self) -> IntArray | None:
        """Account for the records taken since the last call; return them (or None).

        Returns them as one array and whether the sum was recomputed from scratch.
        """
        if not self.unsummed:
            return None
        ids = self.unsummed[0] if len(self.unsummed) == 1 else np.concatenate(self.unsummed)
        self.unsummed.clear()
        self.remaining -= ids.size
        if self.remaining <= self.resum_at:
            self.col_sum = self.x[self.alive].sum(axis=0)
            self.resum_at = self.remaining // 2
            self.resummed = True
        else:
            self.col_sum -= self.x[ids].sum(axis=0)
            self.resummed = False
        return ids

    def centroid(self) -> FloatArray:
        """Mean of the remaining records (call :meth:`commit` first)."""
        return self.col_sum / self.remaining


class _Radial(Protocol):
    def delete(self, ids: IntArray) -> None: ...


class LeafIndex(Index):
    """The bookkeeping of an index over kd leaves, a running centroid and a radial list.

    A subclass sets ``radial`` and calls :meth:`_commit` before each centroid query.
    """

    radial: _Radial

    def __init__(self, x: FloatArray) -> None:
        self.x = x
        self.n = x.shape[0]
        self.live = self.n
        self.alive = np.ones(self.n, dtype=bool)
        self.sums = _CentroidSum(x, self.alive)
        self.pending: list[IntArray] = []
        self.leaves = _Leaves(x, LEAF_SIZE)

    def take(self, ids: IntArray) -> None:
        self.alive[ids] = False
        self.live -= ids.size
        self.leaves.delete(ids)
        self.sums.unsummed.append(ids)

    def _commit(self) -> None:
        """Bookkeeping for removed records that can wait for the next centroid query."""
        ids = self.sums.commit()
        if ids is None:
            return
        self.radial.delete(ids)
        self.pending.append(ids)
        if self.sums.resummed:
            # also drop the emptied leaves
            self.leaves.shrink(np.concatenate(self.pending))
            self.pending.clear()
            self.leaves.compact()
            self._resummed()
        elif len(self.pending) >= SHRINK_EVERY:
            self.leaves.shrink(np.concatenate(self.pending))
            self.pending.clear()

    def _resummed(self) -> None:
        """Called by :meth:`_commit` after the centroid was re-summed and the leaves compacted."""


class _EuclideanIndex(LeafIndex):
    """Radial list (farthest from the centroid) and kd leaves (everything else)."""

    radial: _RadialList

    def __init__(self, x: FloatArray) -> None:
        super().__init__(x)
        self.radial = _RadialList(x, self.alive, self.sums.centroid())

    # -- queries -------------------------------------------------------------------------

    def farthest_from_centroid(self) -> int:
        self._commit()
        return self.radial.farthest_from_centroid(self.sums.centroid())

    def take_group_and_farthest(self, i: int, k: int) -> tuple[IntArray, int]:
        leaves = self.leaves
        query = leaves.query(self.x[i])
        first, s = leaves.group_and_farthest(i, query, k)
        self.take(first)
        if (first == s).any():  # only possible through ties
            s = leaves.farthest(query)
        return first, s

    def take_nearest(self, i: int, k: int) -> IntArray:
        leaves = self.leaves
        ids = leaves.nearest(i, leaves.query(self.x[i], upper=False), k)
        self.take(ids)
        return ids

    def best_other(self, i: int) -> Best | None:
        if self.live < 2:
            return None
        leaves = self.leaves
        j, d2 = leaves.nearest_live(leaves.query(self.x[i], upper=False), exclude=i)
        return Best(j, d2)

    def extender(self, members: IntArray) -> Extender:
        return _EuclideanExtender(self, members)

    def extends(self, inside: float, outside: float, gamma: float) -> bool:
        return math.sqrt(inside) < gamma * math.sqrt(outside)

    def nearest_group(self, rows: IntArray, centroids: FloatArray) -> IntArray:
        out = np.empty(rows.size, dtype=np.int64)
        for t, row in enumerate(rows):
            diff = centroids.T - self.x[row][:, None]
            np.multiply(diff, diff, out=diff)
            out[t] = int(np.argmin(_row_sums(diff)))  # argmin: first (lowest) index on ties
        return out


class _EuclideanExtender(Extender):
    """The unassigned record nearest to any member: one query against all members."""

    def __init__(self, index: _EuclideanIndex, members: IntArray) -> None:
        self.index = index
        self.members = [int(g) for g in members]

    def candidate(self) -> Best:
        j, d2 = self.index.leaves.nearest_to_any(self.index.x[self.members])
        return Best(j, d2)

    def add(self, record: int, other: Best) -> None:
        self.members.append(record)


def _row_sums(sq: FloatArray) -> FloatArray:
    """Sum a ``(d, m)`` array over its rows, strictly in row order."""
    if sq.shape[1] >= 2:
        # numpy reduces a non-innermost axis sequentially, row after row.
        return np.add.reduce(sq, axis=0)
    out = sq[0].copy()
    for row in sq[1:]:
        out += row
    return out


def sort_by_key(
    key: FloatArray, ids: IntArray, points: FloatArray, pos_of: IntArray
) -> tuple[FloatArray, IntArray, FloatArray]:
    """Order records ``ids`` (coordinates ``points[:, i]``) by increasing ``key``.

    Only the ``RADIAL_SORTED`` smallest keys are sorted (stably); the other
    records follow in no particular order and get the last sorted key, which
    bounds theirs from below.  Returns the keys, ids and contiguous points in
    that order and sets ``pos_of[id]`` to each record's position.
    """
    top = min(RADIAL_SORTED, ids.size)
    order = key.argpartition(top - 1) if top < ids.size else np.arange(ids.size)
    head = order[:top]
    order[:top] = head[np.argsort(key[head], kind="stable")]
    key = key[order]
    key[top:] = key[top - 1]
    ids = ids[order]
    pos_of[ids] = np.arange(ids.size)
    return key, ids, np.ascontiguousarray(points[:, order])


class _RadialList:
    """Remaining records sorted by decreasing distance to an anchor point.

    ``-neg_radius[i]`` bounds from above the distance between the anchor and
    the record ``ids[i]``, whose coordinates are ``points[:, i]`` (NaN once
    the record is grouped); ``neg_radius`` is non-decreasing.  ``head`` skips
    the grouped records at the front.
    """

    __slots__ = (
        "x",
        "alive",
        "anchor",
        "neg_radius",
        "points",
        "ids",
        "pos_of",
        "head",
    )

    def __init__(self, x: FloatArray, alive: NDArray[np.bool_], anchor: FloatArray) -> None:
        self.x = x
        self.alive = alive
        self.pos_of = np.zeros(x.shape[0], dtype=np.int64)
        self.rebuild(anchor)

    def rebuild(self, anchor: FloatArray) -> None:
        """Sort the remaining records by decreasing distance to ``anchor``.

        Only the outermost ``RADIAL_SORTED`` records are sorted; the others
        share the radius of the last sorted one as their bound.
        """
        ids = self.alive.nonzero()[0]
        points = self.x[ids].T
        diff = points - anchor[:, None]
        np.multiply(diff, diff, out=diff)
        self.neg_radius, self.ids, self.points = sort_by_key(
            -np.sqrt(_row_sums(diff)), ids, points, self.pos_of
        )
        self.anchor = anchor.tolist()
        self.head = 0

    def delete(self, ids: IntArray) -> None:
        """Hide grouped records from later queries."""
        self.points[:, self.pos_of[ids]] = np.nan

    def _distances(self, q: FloatArray, stop: int) -> FloatArray:
        """Squared distances from ``q`` to entries ``head .. stop - 1``."""
        diff = self.points[:, self.head : stop] - q[:, None]
        np.multiply(diff, diff, out=diff)
        return _row_sums(diff)

    def farthest_from_centroid(self, c: FloatArray) -> int:
        """Row id of the remaining record farthest from ``c``.

        Ties go to the lowest row id.  Rebuilds the list around ``c`` when the
        scan was long.
        """
        alive, ids = self.alive, self.ids
        head = self.head
        while not alive[ids[head]]:
            head += 1
        self.head = head
        point = c.tolist()
        offset = math.dist(point, self.anchor) * (1.0 + MARGIN) + TINY
        # The outermost live record gives a lower bound on the answer; scan
        # every entry whose radius may still reach it.
        known = math.dist(point, self.points[:, head].tolist()) * (1.0 - MARGIN)
        stop = max(head + 2, int(self.neg_radius.searchsorted(offset - known, side="right")))
        dist = self._distances(c, min(stop, ids.size))
        best = float(np.fmax.reduce(dist))
        hits = (dist == best).nonzero()[0] + head
        found = int(ids[hits[0]] if hits.size == 1 else ids[hits].min())
        if dist.size > REBUILD_SCAN:
            self.rebuild(c)
        return found


class _Query(NamedTuple):
    """Per-query-point data shared by the leaf queries."""

    tiled: FloatArray  #: the query point repeated per leaf slot, ``(d * width,)``
    lower: FloatArray  #: per-box lower bounds of the squared distance
    upper: FloatArray | None  #: per-box upper bounds (if requested)


class _Leaves:
    """Padded kd-tree leaves for exact nearest and farthest queries.

    ``xb[b]`` holds the coordinates of the records of leaf ``b`` as ``d``
    consecutive runs of ``width`` slots (slot ``o`` of coordinate ``j`` at
    ``j * width + o``); ``orig[b, o]`` is the row id in slot ``o``.  Grouped
    records and padding hold NaN, which numpy's partitions sort last and
    ``fmax`` ignores.  Every live record of leaf ``bid[j]`` lies within
    ``center[:, j] +- half[:, j]`` (``half`` is widened by ``tol`` so that
    box bounds never beat computed distances by rounding; an empty box has
    ``half = -inf``).
    """

    __slots__ = (
        "xb",
        "orig",
        "d",
        "width",
        "tol",
        "center",
        "half",
        "count",
        "bid",
        "col_of",
        "leaf_of",
        "slot_of",
    )

    def __init__(self, x: FloatArray, leaf_size: int) -> None:
        n, d = x.shape
        perm, sizes = _kd_leaves(x, leaf_size)
        nleaves = sizes.size
        width = max(2, int(sizes.max()))
        starts = np.cumsum(sizes) - sizes
        leaf_of = np.repeat(np.arange(nleaves), sizes)
        slot_of = np.arange(n) - starts[leaf_of]
        self.d = d
        self.width = width
        self.tol = 1e-12 * float(np.abs(x).max()) + TINY
        xb = np.full((nleaves, d, width), np.nan)
        xb[leaf_of, :, slot_of] = x[perm]
        self.xb = xb.reshape(nleaves, d * width)
        self.orig = np.full((nleaves, width), -1, dtype=np.int64)
        self.orig[leaf_of, slot_of] = perm
        self.leaf_of = np.empty(n, dtype=np.int64)
        self.leaf_of[perm] = leaf_of
        self.slot_of = np.empty(n, dtype=np.int64)
        self.slot_of[perm] = slot_of
        self.count = sizes.astype(np.int64)
        self.bid = np.arange(nleaves)
        self.col_of = np.arange(nleaves)
        xp = x[perm]
        lo = np.minimum.reduceat(xp, starts, axis=0)
        hi = np.maximum.reduceat(xp, starts, axis=0)
        self.center = np.ascontiguousarray(((lo + hi) * 0.5).T)
        self.half = np.ascontiguousarray(((hi - lo) * 0.5 + self.tol).T)

    # -- updates -----------------------------------------------------------

    def delete(self, ids: IntArray) -> None:
        """Hide the records ``ids`` from all later queries."""
        leaves = self.leaf_of[ids]
        self.xb.reshape(-1, self.d, self.width)[leaves, :, self.slot_of[ids]] = np.nan
        np.subtract.at(self.count, self.col_of[leaves], 1)

    def shrink(self, ids: IntArray) -> None:
        """Tighten the boxes of the leaves that held the deleted ``ids``."""
        leaves = np.unique(self.leaf_of[ids])
        xb = self.xb[leaves].reshape(-1, self.d, self.width)
        lo = np.fmin.reduce(xb, axis=2).T
        hi = np.fmax.reduce(xb, axis=2).T
        center = (lo + hi) * 0.5
        half = (hi - lo) * 0.5 + self.tol
        empty = np.isnan(half)
        if empty.any():
            center[empty] = 0.0
            half[empty] = -np.inf
        cols = self.col_of[leaves]
        self.center[:, cols] = center
        self.half[:, cols] = half

    def compact(self) -> None:
        """Drop the boxes of the leaves without live records."""
        keep = (self.count > 0).nonzero()[0]
        self.center = np.ascontiguousarray(self.center[:, keep])
        self.half = np.ascontiguousarray(self.half[:, keep])
        self.count = self.count[keep]
        self.bid = self.bid[keep]
        self.col_of[self.bid] = np.arange(keep.size)

    # -- queries -----------------------------------------------------------

    def query(self, q: FloatArray, upper: bool = True) -> _Query:
        """Box bounds of the squared distance from ``q`` to every leaf.

        Per coordinate, with ``t = |center - q|``, the lower bound is
        ``max(t - half, 0) ** 2``, computed as ``((a + |a|) / 2) ** 2`` with
        ``a = t - half`` (exact, and much faster than ``np.maximum``), and the
        upper bound is ``(t + half) ** 2``.  An empty leaf (``half = -inf``)
        gets ``+inf`` and ``-inf``.
        """
        gap = self.center - q[:, None]
        np.abs(gap, out=gap)
        lower = gap - self.half
        np.add(lower, np.abs(lower), out=lower)
        np.multiply(lower, lower, out=lower)
        lower = np.add.reduce(lower, axis=0)
        lower *= 0.25
        up = None
        if upper:
            np.add(gap, self.half, out=gap)
            np.multiply(gap, np.abs(gap), out=gap)
            up = np.add.reduce(gap, axis=0)
        return _Query(np.repeat(q, self.width), lower, up)

    def _distances(self, leaves: IntArray, query: _Query) -> FloatArray:
        """Squared distances from the query point to all slots of ``leaves``.

        Flattened ``(len(leaves) * width,)``; NaN for empty slots.  The sum
        over the coordinates runs in order (numpy reduces a non-innermost
        axis sequentially).
        """
        diff = self.xb.take(leaves, axis=0)
        diff -= query.tiled
        np.multiply(diff, diff, out=diff)
        return np.add.reduce(diff.reshape(-1, self.d, self.width), axis=1).reshape(-1)

    def farthest(self, query: _Query) -> int:
        """Row id of the live record farthest from the query point.

        Ties go to the lowest row id.  The bounds of ``query`` may predate
        some deletions (boxes only shrink, so they stay valid).
        """
        upper = query.upper
        assert upper is not None
        # The leaf of largest bound usually holds a record nearly as far as
        # the farthest one; only the leaves whose bound reaches it remain.
        top = self._top(upper)
        known = float(np.fmax.reduce(self._distances(self.bid[top : top + 1], query)))
        leaves = self.bid[(upper >= _reach(known)).nonzero()[0]]
        flat = self._distances(leaves, query)
        return self._argmax(leaves, flat)

    def nearest(self, i: int, query: _Query, k: int) -> IntArray:
        """Row ids of the live record ``i`` and its ``k - 1`` nearest ones.

        ``query`` holds the bounds for the coordinates of ``i``.  Ties at the
        boundary distance go to the lowest row ids; ``i`` itself always comes
        first.
        """
        lower = query.lower
        leaves = self._first_leaves(lower, k)
        flat = self._distances(leaves, query)
        kth = flat[flat.argpartition(k - 1)[k - 1]]
        limit = _limit(kth)
        wider = self.bid[(lower <= limit).nonzero()[0]]
        if wider.size > leaves.size:
            leaves = wider
            flat = self._distances(leaves, query)
        return self._k_smallest(i, leaves, flat, k, limit)

    def nearest_live(self, query: _Query, exclude: int = -1) -> tuple[int, float]:
        """Row id and squared distance of the live record nearest to the query point.

        ``exclude`` (a row id, or -1) is left out.  Ties go to the lowest row id.  At
        least one live record other than ``exclude`` must exist.
        """
        lower = query.lower
        leaves = self._first_leaves(lower, 2 if exclude >= 0 else 1)
        flat = self._masked_distances(leaves, query, exclude)
        best = float(np.fmin.reduce(flat))
        if best != best:  # no live record in the first leaves (after the exclusion)
            leaves = self.bid
            flat = self._masked_distances(leaves, query, exclude)
            best = float(np.fmin.reduce(flat))
        wider = self.bid[(lower <= _limit(best)).nonzero()[0]]
        if wider.size > leaves.size:
            leaves = wider
            flat = self._masked_distances(leaves, query, exclude)
            best = float(np.fmin.reduce(flat))
        hits = (flat == best).nonzero()[0]
        ids = self.orig[leaves].reshape(-1)[hits]
        return int(ids[0] if ids.size == 1 else ids.min()), best

    def nearest_to_any(self, P: FloatArray) -> tuple[int, float]:
        """Row id and squared distance of the live record nearest to any row of ``P``.

        ``P`` is ``(g, d)``; the boxes are bounded by their smallest lower bound over the
        rows, and the candidate leaves are evaluated against every row at once.  Ties go
        to the lowest row id.  At least one live record must exist.
        """
        gap = np.abs(self.center[None, :, :] - P[:, :, None])
        gap -= self.half[None, :, :]
        np.maximum(gap, 0.0, out=gap)
        np.multiply(gap, gap, out=gap)
        lower = np.fmin.reduce(np.add.reduce(gap, axis=1), axis=0)
        lower[self.count == 0] = np.inf
        leaves = self._first_leaves(lower, 1)
        flat = self._distances_many(leaves, P)
        best = float(np.fmin.reduce(flat))
        if best != best:
            leaves = self.bid
            flat = self._distances_many(leaves, P)
            best = float(np.fmin.reduce(flat))
        wider = self.bid[(lower <= _limit(best)).nonzero()[0]]
        if wider.size > leaves.size:
            leaves = wider
            flat = self._distances_many(leaves, P)
            best = float(np.fmin.reduce(flat))
        hits = (flat == best).nonzero()[0]
        ids = self.orig[leaves].reshape(-1)[hits]
        return int(ids[0] if ids.size == 1 else ids.min()), best

    def _distances_many(self, leaves: IntArray, P: FloatArray) -> FloatArray:
        """Per slot of ``leaves``, the smallest squared distance to a row of ``P``
        (each distance summed over the coordinates in order; NaN for empty slots)."""
        xb = self.xb.take(leaves, axis=0).reshape(1, leaves.size, self.d, self.width)
        diff = xb - P[:, None, :, None]
        np.multiply(diff, diff, out=diff)
        acc = diff[:, :, 0, :].copy()
        for j in range(1, self.d):
            acc += diff[:, :, j, :]
        return np.fmin.reduce(acc, axis=0).reshape(-1)

    def _masked_distances(self, leaves: IntArray, query: _Query, exclude: int) -> FloatArray:
        """:meth:`_distances`, with NaN for the slot of ``exclude`` (if >= 0)."""
        flat = self._distances(leaves, query)
        if exclude >= 0:
            flat[self.orig[leaves].reshape(-1) == exclude] = np.nan
        return flat

    def group_and_farthest(self, i: int, query: _Query, k: int) -> tuple[IntArray, int]:
        """:meth:`nearest` of ``i`` and the farthest live record from ``i``.

        The farthest record is taken over all live records, so the caller
        must check that it is not in the group; both searches share one
        evaluation of the candidate leaves.
        """
        lower, upper = query.lower, query.upper
        assert upper is not None
        near = self._first_leaves(lower, k)
        # The leaves of largest upper bound usually hold a record nearly as
        # far as the farthest one: a good first bound for the farthest.
        nbox = upper.size
        tops = self.bid
        if nbox > FAR_LEAVES:
            tops = tops[upper.argpartition(nbox - FAR_LEAVES)[-FAR_LEAVES:]]
        split = near.size * self.width
        flat = self._distances(np.concatenate((near, tops)), query)
        near_flat = flat[:split]
        kth = near_flat[near_flat.argpartition(k - 1)[k - 1]]
        known = float(np.fmax.reduce(flat[split:]))
        limit = _limit(kth)
        near_cols = (lower <= limit).nonzero()[0]
        far_cols = (upper >= _reach(known)).nonzero()[0]
        leaves = self.bid[np.concatenate([near_cols, far_cols])]
        split = near_cols.size * self.width
        flat = self._distances(leaves, query)
        group = self._k_smallest(i, leaves[: near_cols.size], flat[:split], k, limit)
        return group, self._argmax(leaves[near_cols.size :], flat[split:])

    # -- query helpers -------------------------------------------------------

    def _first_leaves(self, lower: FloatArray, k: int) -> IntArray:
        """The few leaves of smallest lower bound, holding >= k live records.

        Their k-th smallest distance bounds the k-th nearest distance from
        above.
        """
        nbox = lower.size
        take = min(NEAR_LEAVES, nbox)
        while take < nbox:
            cols = lower.argpartition(take)[:take]
            if int(self.count[cols].sum()) >= k:
                return self.bid[cols]
            take = min(2 * take, nbox)
        return self.bid

    def _top(self, upper: FloatArray) -> int:
        """Column of the largest upper bound among leaves with live records."""
        top = int(upper.argmax())
        if self.count[top] == 0:  # emptied since the boxes were last shrunk
            top = int(np.where(self.count > 0, upper, -np.inf).argmax())
        return top

    def _k_smallest(
        self, i: int, leaves: IntArray, flat: FloatArray, k: int, bound: float
    ) -> IntArray:
        """Row ids of the ``k`` smallest distances in ``flat`` (``i`` first).

        ``bound`` is at least the k-th smallest distance.  Ties go to the
        lowest row ids.
        """
        if flat.size > FILTER_ABOVE:
            # Most slots of many leaves are beyond the bound: drop them first.
            hits = (flat <= bound).nonzero()[0]
            near = flat[hits]
            kth = near[near.argpartition(k - 1)[k - 1]]
            hits = hits[near <= kth]
        else:
            kth = flat[flat.argpartition(k - 1)[k - 1]]
            hits = (flat <= kth).nonzero()[0]
        ids = self.orig[leaves].reshape(-1)[hits]
        if hits.size == k:
            return ids  # includes i, at distance 0 <= kth
        dist = flat[hits]
        dist[ids == i] = -1.0
        return ids[np.lexsort((ids, dist))[:k]]

    def _argmax(self, leaves: IntArray, flat: FloatArray) -> int:
        """Row id of the largest distance in ``flat`` (ties: lowest row id)."""
        hits = (flat == np.fmax.reduce(flat)).nonzero()[0]
        ids = self.orig[leaves].reshape(-1)[hits]
        return int(ids[0] if ids.size == 1 else ids.min())


def _limit(kth: float) -> float:
    """Largest lower bound of a leaf that may hold a record within ``kth``."""
    return kth * (1.0 + MARGIN) + TINY


def _reach(known: float) -> float:
    """Smallest upper bound of a leaf that may hold a record beyond ``known``.

    ``known`` is NaN when the probed leaves hold no live record any more:
    then every leaf qualifies.
    """
    return known * (1.0 - MARGIN) if known == known else 0.0


def _kd_leaves(x: FloatArray, leaf_size: int) -> tuple[IntArray, IntArray]:
    """Cut the rows into kd-tree leaves of at most ``leaf_size`` records.

    A segment of more than ``KD_FANOUT * leaf_size`` records is cut along its
    widest dimension into ``KD_FANOUT`` slabs of equal width (which isolates
    outliers quickly and keeps the cells compact); a smaller one is halved at
    the median of its widest dimension, so that the leaves end up well
    filled.  All open segments of a level are cut at once.  Returns the
    row permutation and the leaf sizes (leaves are consecutive runs of it).
    """
    n = x.shape[0]
    fanout = KD_FANOUT
    perm = np.arange(n, dtype=np.int64)
    starts = np.zeros(1, dtype=np.int64)
    sizes = np.array([n], dtype=np.int64)
    leaf_starts: list[IntArray] = []
    leaf_sizes: list[IntArray] = []
    while True:
        is_open = sizes > leaf_size
        leaf_starts.append(starts[~is_open])
        leaf_sizes.append(sizes[~is_open])
        starts, sizes = starts[is_open], sizes[is_open]
        if starts.size == 0:
            break
        nseg = sizes.size
        seg = np.repeat(np.arange(nseg), sizes)
        local = np.cumsum(sizes) - sizes
        rank = np.arange(seg.size) - local[seg]
        pos = starts[seg] + rank
        rows = perm[pos]
        xp = x[rows]
        lo = np.minimum.reduceat(xp, local, axis=0)
        hi = np.maximum.reduceat(xp, local, axis=0)
        dim = np.argmax(hi - lo, axis=1)
        seg_range = np.arange(nseg)
        lo_d = lo[seg_range, dim]
        span = hi[seg_range, dim] - lo_d
        value = xp[np.arange(seg.size), dim[seg]]
        by_slab = (sizes > fanout * leaf_size) & (span > 0)
        scale = np.divide(fanout, span, out=np.zeros(nseg), where=by_slab)
        slab = np.minimum(((value - lo_d[seg]) * scale[seg]).astype(np.int64), fanout - 1)
        halve = ~by_slab[seg]
        if halve.any():
            # Rank by value within the segment (segments are contiguous, so
            # sorting by (segment, value) keeps every segment in place).
            sub = halve.nonzero()[0]
            order = sub[np.lexsort((value[sub], seg[sub]))]
            slab[order] = (2 * rank[sub]) // sizes[seg[sub]]
        key = seg * fanout + slab
        perm[pos] = rows[np.argsort(key, kind="stable")]
        pieces = np.bincount(key, minlength=nseg * fanout)
        piece_starts = np.repeat(starts, fanout) + (
            np.cumsum(pieces) - pieces - np.repeat(local, fanout)
        )
        keep = pieces > 0
        starts, sizes = piece_starts[keep], pieces[keep]
    starts = np.concatenate(leaf_starts)
    sizes = np.concatenate(leaf_sizes)
    return perm, sizes[np.argsort(starts)]
