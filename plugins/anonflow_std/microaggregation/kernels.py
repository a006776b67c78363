"""Exact MDAV-family microaggregation kernels in pure numpy.

Two loops, each written once, and a pluggable *similarity* that answers their queries:

* :func:`mdav_partition` -- MDAV (Maximum Distance to Average Vector; Domingo-Ferrer &
  Mateo-Sanz, 2002), fixed-size groups;
* :func:`vmdav_partition` -- V-MDAV (Solanas & Martinez-Balleste, 2006), variable-size
  groups grown by an extension test.

With :class:`Euclidean` similarity (the default) they are MDAV and V-MDAV; with
:class:`~anonflow_std.microaggregation.grey_similarity.Grey` (the balanced adjacent degree of grey relational
analysis, seed 003) they are GRAV and V-GRAV.  The loops speak of *farthest* (least similar)
and *nearest* (most similar) records only; a similarity decides what that means.

MDAV
----
* while at least ``3k`` records remain: ``c`` is the centroid of the remaining records,
  ``r`` the remaining record farthest from ``c`` and ``s`` the remaining record farthest
  from ``r``; ``r`` and its ``k - 1`` nearest remaining records form a group, then ``s``
  and its ``k - 1`` nearest among the records still remaining form another one;
* if ``2k .. 3k - 1`` records remain, ``r`` (farthest from the centroid) and its ``k - 1``
  nearest records form a group and the rest form the last one;
* otherwise the ``k .. 2k - 1`` remaining records form the last group.

``s`` is the farthest record from ``r`` outside ``r``'s group: that is the textbook ``s``
except in degenerate ties where the textbook ``s`` would itself be swallowed by ``r``'s
group.

V-MDAV
------
While at least ``k`` records remain unassigned (``stop="k"``, SPEC section 8) -- or, as
seed 003 writes it, while at least ``2k`` remain (``stop="2k"``): ``e`` is the unassigned
record farthest from the centroid of the unassigned ones; ``e`` and its ``k - 1`` nearest
unassigned records form a group, which is then *extended*: ``e_in`` is the unassigned
record nearest to any member of the group (``inside`` = that similarity), ``outside`` the
similarity between ``e_in`` and its nearest other unassigned record; if the similarity's
extension test holds (Euclidean: ``d_in < gamma * d_out``; grey: ``gamma * b_in > b_out``)
``e_in`` joins and the extension repeats, until the group has ``2k - 1`` records or the test
fails.  When ``e_in`` is the only unassigned record there is nothing to compare it with: the
extension stops and it is a leftover.  With ``stop="2k"``, ``k .. 2k - 1`` records left at
the end form the last group.  Fewer than ``k`` records left at the end (*leftovers*) each
join the group whose centroid (z-scored, before any leftover joins) is nearest to them.  So
every group has ``k .. 2k - 1`` records, except that leftovers (at most ``k - 1`` in all) may
push a group up to ``3k - 2``.

Ties (equal similarities) are broken by the lower original row index, both for "farthest"
and for the boundary of the "k - 1 nearest"; a record is always in its own group.  Group
ids ``0 .. g - 1`` are numbered in the order the groups are formed.

Euclidean similarity
--------------------
Distances are squared Euclidean distances computed as ``sum_j (x_j - q_j) ** 2``,
accumulated over the columns in order, and every decision is the one a brute-force scan of
all remaining records with that formula makes.  The centroid is a running column sum
(re-summed from scratch whenever the number of remaining records halves, and updated once
per centroid query with all the records grouped since the previous one) divided by their
number.  The extension test compares square roots: ``sqrt(d_in2) < gamma * sqrt(d_out2)``.

Instead of scanning all remaining records several times per group (``O(n^2 d / k)``
overall), every query only evaluates candidates that exact bounds cannot rule out:

* **Farthest from the centroid**: a *radial list* holds the remaining records sorted by
  decreasing distance to an anchor ``a`` (a recent centroid).  By the triangle inequality a
  record ``x`` can only be farther from ``c`` than a record at distance ``D`` if
  ``|x - a| >= D - |c - a|``; taking ``D`` from the outermost live record, a query scans a
  short prefix of the list.  The list is rebuilt around the current centroid when scans get
  long.
* **Nearest neighbours and farthest from ``r``**: the rows are cut once into kd-tree leaves
  of at most 64 records, stored padded in a ``(leaves, d * width)`` array with a bounding
  box per leaf.  A query computes lower and upper bounds of the distance from the query
  point to every box at once (a few vectorized operations), evaluates a few leaves to get a
  first bound on the k-th nearest (resp. the farthest) distance, then evaluates exactly the
  leaves whose box bound can still beat it.  The two searches around ``r`` share their
  evaluations; ``s`` is picked before ``r``'s group is removed and re-picked in the
  (tie-only) case that it falls in that group.  Grouped records become NaN, which
  ``argpartition`` sorts last and ``fmax`` ignores; the boxes are tightened every few
  iterations.
* **Extension** (V-MDAV): one query against all members at once: a box is bounded by its
  smallest lower bound over the members, and the candidate leaves are evaluated against
  every member.

Bounds are compared with a relative margin (``1e-9``) far above their rounding error, so
pruning never drops a candidate.  The loop over groups is the only Python-level loop; one
iteration costs a bounded number of numpy calls on arrays of a few thousand elements (the
per-leaf bounds have ``n / 30`` or so entries).  No BLAS call is involved, so results do not
depend on threads.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

__all__ = ["Similarity", "Euclidean", "mdav_partition", "vmdav_partition", "STOP_RULES"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
ProgressFn = Callable[[int], object]

#: V-MDAV's stopping rules: loop while >= k (SPEC section 8) or >= 2k (seed 003) remain.
STOP_RULES = ("k", "2k")

#: Maximum number of records per kd leaf.
_LEAF_SIZE = 64
#: Slabs per split when building the kd leaves.
_KD_FANOUT = 4
#: Number of progress reports (at most, besides the final one).
_PROGRESS_STEPS = 100
#: Relative slack for pruning bounds (rounding errors are below ``1e-13``).
_MARGIN = 1e-9
#: Absolute slack guarding the relative one against underflow.
_TINY = 1e-280
#: Leaves evaluated up front by a nearest-neighbour query.
_NEAR_LEAVES = 6
#: Pre-filter nearest-neighbour candidates beyond this many slots.
_FILTER_ABOVE = 2048
#: Leaves evaluated up front by a farthest-point query.
_FAR_LEAVES = 3
#: Rebuild the radial list when a centroid query scans more records.
_REBUILD_SCAN = 2048
#: Records sorted exactly when the radial list is rebuilt.
_RADIAL_SORTED = 8192
#: Centroid queries between two refreshes of the leaf boxes.
_SHRINK_EVERY = 8


# -- the pluggable similarity ------------------------------------------------------------


class Best(NamedTuple):
    """The most similar remaining record to some reference, and its similarity value."""

    id: int
    #: squared distance (Euclidean) or balanced adjacent degree (grey)
    value: float
    #: whatever the similarity needs to keep the answer valid while records leave
    state: object = None


class Extender(ABC):
    """Tracks, for a group being extended, the unassigned record nearest to any member."""

    @abstractmethod
    def candidate(self) -> Best:
        """The unassigned record nearest to any member (ties: lowest row) and that similarity."""

    @abstractmethod
    def add(self, record: int, other: Best) -> None:
        """``record`` (just taken) joins the group; ``other`` is its :meth:`Index.best_other`."""


class Index(ABC):
    """The queries the MDAV-family loops make, over the records not yet grouped.

    An index owns the set of *remaining* records: :meth:`take` removes records from it and
    every query answers for the records remaining at that moment.  Ties go to the lowest
    row index.
    """

    #: number of remaining records
    live: int

    @abstractmethod
    def farthest_from_centroid(self) -> int:
        """The remaining record least similar to the centroid of the remaining records."""

    @abstractmethod
    def take_group_and_farthest(self, i: int, k: int) -> tuple[IntArray, int]:
        """Take ``i`` and its ``k - 1`` nearest remaining records as a group; also return
        the remaining record farthest from ``i`` outside that group (chosen with the
        similarities of ``i`` as they were before the group was taken)."""

    @abstractmethod
    def take_nearest(self, i: int, k: int) -> IntArray:
        """Take ``i`` and its ``k - 1`` nearest remaining records as a group."""

    @abstractmethod
    def take(self, ids: IntArray) -> None:
        """Remove ``ids`` from the remaining records."""

    @abstractmethod
    def best_other(self, i: int) -> Best | None:
        """The remaining record other than ``i`` nearest to the remaining record ``i``
        (None when ``i`` is the only one)."""

    @abstractmethod
    def extender(self, members: IntArray) -> Extender:
        """An :class:`Extender` for the group ``members`` (already taken)."""

    @abstractmethod
    def extends(self, inside: float, outside: float, gamma: float) -> bool:
        """V-MDAV's extension test for the candidate's similarity to the group (``inside``)
        and to its nearest other unassigned record (``outside``)."""

    def never_extends(self, gamma: float) -> bool:
        """True when the extension test cannot hold for any data (a shortcut)."""
        return gamma <= 0

    @abstractmethod
    def nearest_group(self, rows: IntArray, centroids: FloatArray) -> IntArray:
        """For each record of ``rows``, the index of the nearest of ``centroids``
        (``(g, d)``, z-scored); ties: the lowest index."""


class Similarity(ABC):
    """How records are compared: builds an :class:`Index` over the rows of ``X``."""

    #: short name, used in messages
    name: str = ""

    @abstractmethod
    def index(self, x: FloatArray) -> Index:
        """An index over all rows of the ``(n, d)`` array ``x`` (all remaining)."""

    def prepare(self, x: FloatArray) -> FloatArray:
        """The coordinates the index works on (default: ``x`` itself)."""
        return x


class Euclidean(Similarity):
    """Euclidean distance: MDAV and V-MDAV."""

    name = "euclidean"

    def index(self, x: FloatArray) -> Index:
        return _EuclideanIndex(x)


# -- the loops -------------------------------------------------------------------------


def _check_input(X: np.ndarray, k: int) -> tuple[FloatArray, int]:
    x = np.ascontiguousarray(X, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"X must be a 2-D array, got shape {x.shape}")
    n = x.shape[0]
    k = int(k)
    if k < 1 or k > n:
        raise ValueError(f"k must satisfy 1 <= k <= n (k={k}, n={n})")
    if not np.isfinite(x).all():
        raise ValueError("X must not contain NaN or infinite values")
    if x.shape[1] == 0:  # no coordinates: all records coincide
        x = np.zeros((n, 1))
    return x, k


class _Groups:
    """Labels under construction, numbered in formation order, with progress reports."""

    def __init__(self, n: int, progress: ProgressFn | None) -> None:
        self.labels = np.full(n, -1, dtype=np.int64)
        self.count = 0
        self.assigned = 0
        self.reporter = _Progress(n, progress)

    def emit(self, ids: IntArray | list[int]) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        self.labels[ids] = self.count
        self.count += 1
        self.assigned += ids.size
        self.reporter.update(self.assigned)

    def rest(self) -> IntArray:
        return (self.labels < 0).nonzero()[0]


def mdav_partition(
    X: np.ndarray,
    k: int,
    progress: ProgressFn | None = None,
    similarity: Similarity | None = None,
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
    similarity:
        :class:`Euclidean` (default: MDAV) or ``Grey`` (GRAV).

    Returns
    -------
    numpy.ndarray
        ``int64`` labels of shape ``(n,)``; group ids ``0 .. g - 1`` are
        numbered in the order the groups are formed.  All groups have exactly
        ``k`` records except the last one, which has ``k .. 2k - 1``.
    """
    x, k = _check_input(X, k)
    n = x.shape[0]
    sim = similarity or Euclidean()
    groups = _Groups(n, progress)
    if n >= 2 * k:
        index = sim.index(sim.prepare(x))
        while index.live >= 3 * k:
            r = index.farthest_from_centroid()
            first, s = index.take_group_and_farthest(r, k)
            groups.emit(first)
            groups.emit(index.take_nearest(s, k))
        if index.live >= 2 * k:
            groups.emit(index.take_nearest(index.farthest_from_centroid(), k))
    rest = groups.rest()
    if rest.size:
        groups.emit(rest)
    groups.reporter.done()
    return groups.labels


def vmdav_partition(
    X: np.ndarray,
    k: int,
    gamma: float = 0.2,
    *,
    stop: str = "k",
    similarity: Similarity | None = None,
    progress: ProgressFn | None = None,
) -> IntArray:
    """Partition the rows of ``X`` into V-MDAV groups of ``k .. 2k - 1`` records.

    ``gamma >= 0`` is the gain factor of the extension test; ``stop`` is ``"k"`` (form
    groups while at least ``k`` records remain, SPEC section 8) or ``"2k"`` (while at
    least ``2k`` remain, seed 003; then ``k .. 2k - 1`` left form the last group).
    Leftovers (fewer than ``k`` records) join the group with the nearest centroid, which
    may then exceed ``2k - 1`` records (at most ``3k - 2``).  ``similarity`` is
    :class:`Euclidean` (default: V-MDAV) or ``Grey`` (V-GRAV).  Returns ``int64`` labels
    numbered in formation order.
    """
    x, k = _check_input(X, k)
    gamma = float(gamma)
    if not gamma >= 0 or not math.isfinite(gamma):
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}")
    if stop not in STOP_RULES:
        raise ValueError(f"stop must be one of {STOP_RULES}, got {stop!r}")
    n = x.shape[0]
    sim = similarity or Euclidean()
    groups = _Groups(n, progress)
    z = sim.prepare(x)
    index = sim.index(z)
    limit = k if stop == "k" else 2 * k
    grow = not index.never_extends(gamma)
    while index.live >= limit:
        e = index.farthest_from_centroid()
        group = list(index.take_nearest(e, k))
        if grow and len(group) < 2 * k - 1 and index.live >= 2:
            ext = index.extender(np.asarray(group, dtype=np.int64))
            while len(group) < 2 * k - 1 and index.live >= 2:
                cand = ext.candidate()
                other = index.best_other(cand.id)
                if other is None or not index.extends(cand.value, other.value, gamma):
                    break
                index.take(np.array([cand.id], dtype=np.int64))
                ext.add(cand.id, other)
                group.append(cand.id)
        groups.emit(group)
    rest = groups.rest()
    if rest.size >= k or (rest.size and groups.count == 0):
        groups.emit(rest)  # stop="2k": the k .. 2k - 1 records left form the last group
    elif rest.size:
        labels = groups.labels
        assigned = labels >= 0
        sizes = np.bincount(labels[assigned], minlength=groups.count).astype(np.float64)
        centroids = np.empty((groups.count, z.shape[1]))
        for j in range(z.shape[1]):
            centroids[:, j] = np.bincount(labels[assigned], weights=z[assigned, j],
                                          minlength=groups.count) / sizes
        labels[rest] = index.nearest_group(rest, centroids)
    groups.reporter.done()
    return groups.labels


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


# -- Euclidean index -----------------------------------------------------------------


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


class _LeafIndex(Index):
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
        self.leaves = _Leaves(x, _LEAF_SIZE)

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
        elif len(self.pending) >= _SHRINK_EVERY:
            self.leaves.shrink(np.concatenate(self.pending))
            self.pending.clear()

    def _resummed(self) -> None:
        """Called by :meth:`_commit` after the centroid was re-summed and the leaves compacted."""


class _EuclideanIndex(_LeafIndex):
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


def _sort_by_key(
    key: FloatArray, ids: IntArray, points: FloatArray, pos_of: IntArray
) -> tuple[FloatArray, IntArray, FloatArray]:
    """Order records ``ids`` (coordinates ``points[:, i]``) by increasing ``key``.

    Only the ``_RADIAL_SORTED`` smallest keys are sorted (stably); the other
    records follow in no particular order and get the last sorted key, which
    bounds theirs from below.  Returns the keys, ids and contiguous points in
    that order and sets ``pos_of[id]`` to each record's position.
    """
    top = min(_RADIAL_SORTED, ids.size)
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

        Only the outermost ``_RADIAL_SORTED`` records are sorted; the others
        share the radius of the last sorted one as their bound.
        """
        ids = self.alive.nonzero()[0]
        points = self.x[ids].T
        diff = points - anchor[:, None]
        np.multiply(diff, diff, out=diff)
        self.neg_radius, self.ids, self.points = _sort_by_key(
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
        offset = math.dist(point, self.anchor) * (1.0 + _MARGIN) + _TINY
        # The outermost live record gives a lower bound on the answer; scan
        # every entry whose radius may still reach it.
        known = math.dist(point, self.points[:, head].tolist()) * (1.0 - _MARGIN)
        stop = max(head + 2, int(self.neg_radius.searchsorted(offset - known, side="right")))
        dist = self._distances(c, min(stop, ids.size))
        best = float(np.fmax.reduce(dist))
        hits = (dist == best).nonzero()[0] + head
        found = int(ids[hits[0]] if hits.size == 1 else ids[hits].min())
        if dist.size > _REBUILD_SCAN:
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
        self.tol = 1e-12 * float(np.abs(x).max()) + _TINY
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
        if nbox > _FAR_LEAVES:
            tops = tops[upper.argpartition(nbox - _FAR_LEAVES)[-_FAR_LEAVES:]]
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
        take = min(_NEAR_LEAVES, nbox)
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
        if flat.size > _FILTER_ABOVE:
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
    return kth * (1.0 + _MARGIN) + _TINY


def _reach(known: float) -> float:
    """Smallest upper bound of a leaf that may hold a record beyond ``known``.

    ``known`` is NaN when the probed leaves hold no live record any more:
    then every leaf qualifies.
    """
    return known * (1.0 - _MARGIN) if known == known else 0.0


def _kd_leaves(x: FloatArray, leaf_size: int) -> tuple[IntArray, IntArray]:
    """Cut the rows into kd-tree leaves of at most ``leaf_size`` records.

    A segment of more than ``_KD_FANOUT * leaf_size`` records is cut along its
    widest dimension into ``_KD_FANOUT`` slabs of equal width (which isolates
    outliers quickly and keeps the cells compact); a smaller one is halved at
    the median of its widest dimension, so that the leaves end up well
    filled.  All open segments of a level are cut at once.  Returns the
    row permutation and the leaf sizes (leaves are consecutive runs of it).
    """
    n = x.shape[0]
    fanout = _KD_FANOUT
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
