"""Exact MDAV microaggregation kernel in pure numpy.

MDAV (Maximum Distance to Average Vector; Domingo-Ferrer & Mateo-Sanz, 2002)
with fixed-size groups:

* while at least ``3k`` records remain: ``c`` is the centroid of the remaining
  records, ``r`` the remaining record farthest from ``c`` and ``s`` the
  remaining record farthest from ``r``; ``r`` and its ``k - 1`` nearest
  remaining records form a group, then ``s`` and its ``k - 1`` nearest among
  the records still remaining form another one;
* if ``2k .. 3k - 1`` records remain, ``r`` (farthest from the centroid) and
  its ``k - 1`` nearest records form a group and the rest form the last one;
* otherwise the ``k .. 2k - 1`` remaining records form the last group.

Ties are broken by the lower original row index, both for "farthest" and for
the boundary of the "k - 1 nearest"; a record is always in its own group.
``s`` is the farthest record from ``r`` outside ``r``'s group: that is the
textbook ``s`` except in degenerate ties where the textbook ``s`` would itself
be swallowed by ``r``'s group.

Distances are squared Euclidean distances computed as
``sum_j (x_j - q_j) ** 2`` accumulated over the columns in order, and the
result is exactly what a brute-force scan of all remaining records with that
formula gives.  Speed comes from two pruning structures, both exact:

* **Radial list** (farthest-point queries).  The remaining records sorted by
  decreasing distance to an anchor ``a`` (a recent centroid).  By the triangle
  inequality a record ``x`` can only be farther from ``q`` than some record at
  squared distance ``best`` if ``|x - a| >= sqrt(best) - |q - a|``, so a query
  scans only a prefix of the list.  Queries around the current centroid touch
  a handful of records; when the centroid has drifted so much that a scan gets
  long, the list is rebuilt around the current centroid.
* **kd leaves** (nearest-neighbour queries).  The rows are cut once into small
  kd-tree leaves (midpoint splits on the widest dimension), stored padded in a
  ``(leaves, d, width)`` array together with their bounding boxes.  A query
  computes, for all leaves at once, a lower bound of the distance from the
  query point to the box and evaluates only the leaves that can hold one of
  the ``k`` nearest records.  Removed records are overwritten with a far-away
  sentinel coordinate, so no masking is needed.

Bounds are compared with a relative safety margin far larger than their
rounding error.  The loop over groups is the only Python-level loop; each
iteration costs a bounded number of numpy calls on small arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

__all__ = ["mdav_partition"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
ProgressFn = Callable[[int], object]

#: Maximum number of records per kd leaf.
LEAF_SIZE = 64
#: Number of progress reports (at most, besides the final one).
_PROGRESS_STEPS = 100
#: Relative slack for pruning bounds (rounding errors are below ``1e-13``).
_MARGIN = 1e-9
#: Absolute slack guarding the relative one against underflow.
_TINY = 1e-280
#: Leaves evaluated up front by a nearest-neighbour query.
_NEAR_LEAVES = 4
#: Records evaluated up front by a farthest-point query.
_PROBE = 16
#: Rebuild the radial list when a centroid query scans more records.
_REBUILD_SCAN = 256


def mdav_partition(
    X: np.ndarray, k: int, progress: ProgressFn | None = None
) -> IntArray:
    """Partition the rows of ``X`` into MDAV groups of ``k`` records.

    Parameters
    ----------
    X:
        ``(n, d)`` float array, already standardized by the caller.
    k:
        Minimum group size, ``1 <= k <= n``.
    progress:
        Optional callable invoked with the number of records assigned so far;
        it is called at most about 100 times plus once at the end.

    Returns
    -------
    numpy.ndarray
        ``int64`` labels of shape ``(n,)``; group ids ``0 .. g - 1`` are
        numbered in the order the groups are formed.  All groups have exactly
        ``k`` records except the last one, which has ``k .. 2k - 1``.
    """
    x = np.ascontiguousarray(X, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"X must be a 2-D array, got shape {x.shape}")
    n = x.shape[0]
    k = int(k)
    if k < 1 or k > n:
        raise ValueError(f"k must satisfy 1 <= k <= n (k={k}, n={n})")
    if not np.isfinite(x).all():
        raise ValueError("X must not contain NaN or infinite values")

    labels = np.full(n, -1, dtype=np.int64)
    reporter = _Progress(n, progress)
    if n >= 2 * k:
        _MdavRun(x, k, labels, reporter).run()
    labels[labels < 0] = labels.max() + 1
    reporter.done()
    return labels


class _Progress:
    """Throttled progress reporting: at most ``_PROGRESS_STEPS`` + 1 calls."""

    __slots__ = ("_callback", "_n", "_next", "_step")

    def __init__(self, n: int, callback: ProgressFn | None) -> None:
        self._callback = callback
        self._n = n
        self._step = max(1, -(-n // _PROGRESS_STEPS))
        self._next = self._step

    def update(self, assigned: int) -> None:
        """Report ``assigned`` if another step of ``n / 100`` was crossed."""
        if self._callback is not None and self._next <= assigned < self._n:
            self._callback(assigned)
            self._next = (assigned // self._step + 1) * self._step

    def done(self) -> None:
        """Final report: every record is assigned."""
        if self._callback is not None:
            self._callback(self._n)


class _MdavRun:
    """State of one MDAV run: remaining records, running sums, group ids."""

    def __init__(
        self, x: FloatArray, k: int, labels: IntArray, reporter: _Progress
    ) -> None:
        self.x = x
        self.k = k
        self.labels = labels
        self.reporter = reporter
        self.dead = np.zeros(x.shape[0], dtype=bool)
        self.remaining = x.shape[0]
        self.col_sum = x.sum(axis=0)
        self.resum_at = self.remaining // 2
        self.group = 0
        self.leaves = _Leaves(x, LEAF_SIZE)
        self.radial = _RadialList(x, self.dead, self.centroid())

    def centroid(self) -> FloatArray:
        """Mean of the remaining records."""
        return self.col_sum / self.remaining

    def run(self) -> None:
        """Form all groups but the last one (left with label ``-1``)."""
        k = self.k
        while self.remaining >= 3 * k:
            r = self.radial.farthest_from_centroid(self.centroid())
            self.take(self.leaves.nearest(r, k))
            q = self.x[r]
            s = self.leaves.farthest(q, self.radial.probe(q))
            self.take(self.leaves.nearest(s, k))
        if self.remaining >= 2 * k:
            r = self.radial.farthest_from_centroid(self.centroid())
            self.take(self.leaves.nearest(r, k))

    def take(self, ids: IntArray) -> None:
        """Turn the records ``ids`` into the next group."""
        self.labels[ids] = self.group
        self.group += 1
        self.dead[ids] = True
        self.leaves.remove(ids)
        self.remaining -= ids.size
        if self.remaining <= self.resum_at:
            # Re-sum from scratch now and then so that rounding errors of the
            # running sum cannot accumulate; also drop the emptied leaves.
            self.col_sum = self.x[~self.dead].sum(axis=0)
            self.resum_at = self.remaining // 2
            self.leaves.compact()
        else:
            self.col_sum = self.col_sum - self.x[ids].sum(axis=0)
        self.reporter.update(self.x.shape[0] - self.remaining)


def _row_sums(sq: FloatArray) -> FloatArray:
    """Sum a ``(d, m)`` array over its rows, strictly in row order."""
    if sq.shape[1] >= 2:
        # numpy reduces a non-innermost axis sequentially, row after row.
        return sq.sum(axis=0)
    out = sq[0].copy()
    for row in sq[1:]:
        out += row
    return out


class _RadialList:
    """Remaining records sorted by decreasing distance to an anchor point.

    ``radius[i]`` bounds from above the distance between the anchor and the
    record ``ids[i]``, whose coordinates are ``points[:, i]``.  Entries of
    records that have been grouped stay in place (``dead`` tells them apart)
    until the list is rebuilt; ``head`` skips the dead entries at the front.
    """

    __slots__ = ("x", "dead", "anchor", "radius", "points", "ids", "head")

    def __init__(self, x: FloatArray, dead: BoolArray, anchor: FloatArray) -> None:
        self.x = x
        self.dead = dead
        self.anchor = anchor
        self.radius = np.zeros(0)
        self.points = np.zeros((x.shape[1], 0))
        self.ids = np.zeros(0, dtype=np.int64)
        self.head = 0
        self.rebuild(anchor)

    def rebuild(self, anchor: FloatArray) -> None:
        """Sort the remaining records by decreasing distance to ``anchor``."""
        ids = np.flatnonzero(~self.dead)
        points = self.x[ids].T
        diff = points - anchor[:, None]
        np.multiply(diff, diff, out=diff)
        radius = np.sqrt(_row_sums(diff))
        order = np.argsort(-radius, kind="stable")
        self.anchor = anchor
        self.radius = radius[order]
        self.ids = ids[order]
        self.points = np.ascontiguousarray(points[:, order])
        self.head = 0

    def _skip_dead(self) -> None:
        """Advance ``head`` to the first entry of a live record."""
        dead, ids = self.dead, self.ids
        head = self.head
        while dead[ids[head]]:
            head += 1
        self.head = head

    def _live_distances(self, q: FloatArray, stop: int) -> FloatArray:
        """Squared distances from ``q`` to entries ``head .. stop - 1``.

        Entries of grouped records get ``-inf``.
        """
        diff = self.points[:, self.head : stop] - q[:, None]
        np.multiply(diff, diff, out=diff)
        dist = _row_sums(diff)
        dist[self.dead[self.ids[self.head : stop]]] = -np.inf
        return dist

    def probe(self, q: FloatArray) -> float:
        """Squared distance from ``q`` to some live record (a lower bound on
        the farthest distance), taken among the outermost entries."""
        self._skip_dead()
        dist = self._live_distances(q, min(self.head + _PROBE, self.ids.size))
        return float(dist.max())

    def farthest_from_centroid(self, c: FloatArray) -> int:
        """Like :meth:`farthest`; rebuilds the list around ``c`` if needed."""
        best, scanned = self._farthest(c)
        if scanned > _REBUILD_SCAN:
            self.rebuild(c)
        return best

    def _farthest(self, q: FloatArray) -> tuple[int, int]:
        """Farthest record from ``q`` and the number of entries scanned."""
        self._skip_dead()
        head, ids = self.head, self.ids
        shift = q - self.anchor
        offset = math.sqrt(float(np.dot(shift, shift))) * (1.0 + _MARGIN) + _TINY
        # Probe the outermost records for a first lower bound on the answer,
        # then scan every entry whose radius may still beat it.
        probe = min(head + _PROBE, self.ids.size)
        dist = self._live_distances(q, probe)
        reach = math.sqrt(float(dist.max()) * (1.0 - _MARGIN)) - offset
        stop = int(np.searchsorted(-self.radius, -reach, side="right"))
        if stop > probe:
            dist = self._live_distances(q, stop)
        hits = np.flatnonzero(dist == dist.max())
        pos = head + hits
        best = ids[pos[0]] if hits.size == 1 else ids[pos].min()
        return int(best), dist.size


class _Leaves:
    """Padded kd-tree leaves for exact nearest and farthest queries.

    ``xb[b, :, o]`` holds the coordinates of the record in slot ``(b, o)``
    (row id ``orig[b, o]``); grouped records and padding hold NaN, which
    numpy's partitions sort last and ``fmin``/``fmax`` ignore.  ``box`` has
    shape ``(2, d, nbox)``: for the leaf ``bid[j]``, ``box[0, :, j]`` and
    ``-box[1, :, j]`` are the minima and maxima of its live records (NaN once
    the leaf is empty, which no bound comparison selects).
    """

    __slots__ = (
        "xb",
        "orig",
        "width",
        "box",
        "bid",
        "col_of",
        "leaf_of",
        "slot_of",
        "count",
    )

    def __init__(self, x: FloatArray, leaf_size: int) -> None:
        n, d = x.shape
        perm, sizes = _kd_leaves(x, leaf_size)
        nleaves = sizes.size
        width = max(2, int(sizes.max()))
        starts = np.cumsum(sizes) - sizes
        leaf_of = np.repeat(np.arange(nleaves), sizes)
        slot_of = np.arange(n) - starts[leaf_of]
        self.width = width
        self.xb = np.full((nleaves, d, width), np.nan)
        self.xb[leaf_of, :, slot_of] = x[perm]
        self.orig = np.full((nleaves, width), -1, dtype=np.int64)
        self.orig[leaf_of, slot_of] = perm
        self.leaf_of = np.empty(n, dtype=np.int64)
        self.leaf_of[perm] = leaf_of
        self.slot_of = np.empty(n, dtype=np.int64)
        self.slot_of[perm] = slot_of
        self.bid = np.arange(nleaves)
        self.col_of = np.arange(nleaves)
        lo = np.fmin.reduce(self.xb, axis=2)
        hi = np.fmax.reduce(self.xb, axis=2)
        self.box = np.ascontiguousarray(np.stack([lo.T, -hi.T]))
        self.count = sizes.astype(np.int64)

    def compact(self) -> None:
        """Drop the boxes of the leaves without live records."""
        keep = np.flatnonzero(~np.isnan(self.box[0, 0]))
        self.box = np.ascontiguousarray(self.box[:, :, keep])
        self.count = self.count[keep]
        self.bid = self.bid[keep]
        self.col_of[self.bid] = np.arange(self.bid.size)

    def remove(self, ids: IntArray) -> None:
        """Delete the records ``ids`` and shrink the boxes of their leaves."""
        leaves = self.leaf_of[ids]
        self.xb[leaves, :, self.slot_of[ids]] = np.nan
        xb = self.xb[leaves]
        cols = self.col_of[leaves]
        np.subtract.at(self.count, cols, 1)
        self.box[0][:, cols] = np.fmin.reduce(xb, axis=2).T
        self.box[1][:, cols] = -np.fmax.reduce(xb, axis=2).T

    def _distances(self, leaves: IntArray, q: FloatArray) -> FloatArray:
        """Squared distances from ``q`` to every slot of ``leaves``.

        Returns a ``(len(leaves), width)`` array, NaN for empty slots.  The
        sum over the columns runs in column order (numpy reduces a
        non-innermost axis sequentially).
        """
        diff = self.xb[leaves] - q[None, :, None]
        np.multiply(diff, diff, out=diff)
        return diff.sum(axis=1)

    def farthest(self, q: FloatArray, known: float) -> int:
        """Row id of the live record farthest from ``q``.

        ``known`` must be the squared distance from ``q`` to some live record.
        Ties go to the lowest row id.
        """
        shifted = self.box + np.stack([-q, q])[:, :, None]
        np.multiply(shifted, shifted, out=shifted)
        upper = np.maximum(shifted[0], shifted[1]).sum(axis=0)
        # The leaf of largest bound usually holds a record nearly as far as
        # the farthest one; only leaves whose bound reaches it remain.
        top = int(np.nanargmax(upper))
        known = max(known, float(np.fmax.reduce(self._distances(self.bid[top : top + 1], q), axis=None)))
        leaves = self.bid[np.flatnonzero(upper >= known * (1.0 - _MARGIN))]
        flat = self._distances(leaves, q).ravel()
        hits = np.flatnonzero(flat == np.fmax.reduce(flat))
        ids = self.orig[leaves].ravel()[hits]
        return int(ids[0] if ids.size == 1 else ids.min())

    def nearest(self, i: int, k: int) -> IntArray:
        """Row ids of record ``i`` and its ``k - 1`` nearest live records.

        Ties at the boundary distance go to the lowest row ids; ``i`` itself
        always comes first.
        """
        leaf, slot = self.leaf_of[i], self.slot_of[i]
        q = self.xb[leaf, :, slot].copy()
        shifted = self.box + np.stack([-q, q])[:, :, None]
        gap = np.maximum(shifted[0], shifted[1])
        np.maximum(gap, 0.0, out=gap)
        np.multiply(gap, gap, out=gap)
        lower = gap.sum(axis=0)
        # Phase 1: the leaves of smallest lower bound holding >= k records
        # bound the k-th distance from above.
        nbox = lower.size
        take = min(_NEAR_LEAVES, nbox)
        while True:
            order = np.argpartition(lower, take) if take < nbox else np.arange(nbox)
            cols = order[:take]
            if take == nbox or int(self.count[cols].sum()) >= k:
                break
            take = min(2 * take, nbox)
        leaves = self.bid[cols]
        dist = self._distances(leaves, q)
        flat = dist.ravel()
        limit = float(np.partition(flat, k - 1)[k - 1]) * (1.0 + _MARGIN) + _TINY
        # Phase 2, unless no other leaf can hold a record within the bound.
        if take < nbox and lower[order[take]] <= limit:
            leaves = self.bid[np.flatnonzero(lower <= limit)]
            dist = self._distances(leaves, q)
        dist[leaves == leaf, slot] = -1.0  # the record itself comes first
        flat = dist.ravel()
        kth = flat[np.argpartition(flat, k - 1)[k - 1]]
        hits = np.flatnonzero(flat <= kth)
        ids = self.orig[leaves].ravel()[hits]
        if hits.size > k:
            ids = ids[np.lexsort((ids, flat[hits]))[:k]]
        return ids


def _kd_leaves(x: FloatArray, leaf_size: int) -> tuple[IntArray, IntArray]:
    """Cut the rows into kd-tree leaves of at most ``leaf_size`` records.

    Every segment larger than ``leaf_size`` is split at the midpoint of its
    widest dimension (segments of identical records are halved by position).
    All segments of a level are split at once.  Returns the row permutation
    and the leaf sizes (leaves are consecutive runs of the permutation).
    """
    n = x.shape[0]
    perm = np.arange(n, dtype=np.int64)
    sizes = np.array([n], dtype=np.int64)
    while (sizes > leaf_size).any():
        nseg = sizes.size
        starts = np.cumsum(sizes) - sizes
        xp = x[perm]
        lo = np.minimum.reduceat(xp, starts, axis=0)
        hi = np.maximum.reduceat(xp, starts, axis=0)
        dim = np.argmax(hi - lo, axis=1)
        seg_range = np.arange(nseg)
        lo_d = lo[seg_range, dim]
        hi_d = hi[seg_range, dim]
        mid = lo_d + 0.5 * (hi_d - lo_d)
        mid = np.where(mid < hi_d, mid, lo_d)
        seg = np.repeat(seg_range, sizes)
        value = xp[np.arange(n), dim[seg]]
        rank = np.arange(n) - starts[seg]
        split = sizes > leaf_size
        right = np.where(
            (hi_d > lo_d)[seg], value > mid[seg], rank >= (sizes // 2)[seg]
        ) & split[seg]
        order = np.argsort(2 * seg + right, kind="stable")
        perm = perm[order]
        n_right = np.bincount(seg, weights=right, minlength=nseg).astype(np.int64)
        pieces = np.stack([sizes - n_right, n_right], axis=1).ravel()
        sizes = pieces[pieces > 0]
    return perm, sizes
