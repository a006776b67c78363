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
from collections.abc import Callable

import numpy as np

from .leaf_index import Euclidean
from .similarity import FloatArray, IntArray, Similarity

__all__ = ["Similarity", "Euclidean", "mdav_partition", "vmdav_partition", "STOP_RULES"]

ProgressFn = Callable[[int], object]

#: V-MDAV's stopping rules: loop while >= k (SPEC section 8) or >= 2k (seed 003) remain.
STOP_RULES = ("k", "2k")

#: Number of progress reports (at most, besides the final one).
_PROGRESS_STEPS = 100


# -- the pluggable similarity ------------------------------------------------------------


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


