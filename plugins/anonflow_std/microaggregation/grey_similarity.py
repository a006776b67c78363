"""Grey relational similarity for the MDAV-family loops: GRAV and V-GRAV (seed 003).

:class:`Grey` plugs the *balanced adjacent degree* ``B`` (SPEC section 8, seed 003 Def.
1-3; :mod:`.grey_degree`) into :func:`~anonflow_std.microaggregation.kernels.mdav_partition`
and :func:`~anonflow_std.microaggregation.kernels.vmdav_partition` in place of the Euclidean distance:
"farthest" becomes least ``B``, "nearest" becomes largest ``B``, and V-MDAV's extension
test becomes ``gamma * b_in > b_out``.

``B(x0, X_i)`` is relative to a *comparison set* (``Dmin`` and ``Dmax`` are taken over all
of it).  Here the comparison set of every query is **the records not yet grouped, minus
the reference record itself** when it is one of them (a reference is never compared with
itself; grey relational analysis keeps the reference sequence apart from the comparison
sequences).  So:

* farthest from the centroid: reference = the centroid of the unassigned records,
  comparison set = all unassigned records;
* ``r``'s ``k - 1`` nearest and the farthest from ``r`` (GRAV's ``s``): reference ``r``,
  comparison set = the other unassigned records (``s`` is chosen with these values,
  outside ``r``'s group);
* ``b_in``: reference = each group member, comparison set = the unassigned records;
  ``b_out``: reference ``e_max``, comparison set = the other unassigned records;
* leftovers (V-GRAV): reference = the leftover record, comparison set = the centroids
  of the groups; it joins the group of largest ``B``.

Attributes that are constant over the whole table carry no information and are left out
(with them every coefficient of that attribute would be 1 and ``Dmin`` 0); if every
attribute is constant, all records are identical (``B = 1``) and ties decide.

Formula and exactness
---------------------
With ``a = zeta * Dmax`` and per attribute ``r(k) = (Dmin + a) / (|d_k| + a)``, every
coefficient of one query is ``c * a / (|d_k| + a)`` with the same ``c = (Dmin + a) / a``,
and the balance degree ``E`` does not change when all coefficients are scaled: so
``B = c * B0``, ``B0`` being the degree with ``Dmin = 0`` (:func:`_degree0`: with
``r0(k) = a / (|d_k| + a)``, ``S`` and ``T = sum r0 ln r0`` summed over the attributes in
order, ``B0 = min(1, (S ln S - T) / (m ln m))``, the form of ``anonflow_std.microaggregation.grey_degree``;
``B0 = r0`` when ``m = 1`` and 1 when ``Dmax = 0``).  Rankings within a query (nearest,
farthest, a leftover's group) compare ``B0``; the extension test, which compares ``B`` of
different references, uses ``B = min(1, c * B0)`` (:func:`grey_scores`).  Every decision
is the one a brute-force scan of the comparison set with these functions makes (ties: the
lower row), and ``Dmin`` / ``Dmax`` are exact.

Design
------
``B`` is not a metric (no triangle inequality), but it *decreases in every per-attribute
difference* (``dB/dr(k) = ln(S / r(k)) / (m ln m) > 0`` and ``r(k)`` decreases in
``|d_k|``).  So the kd leaves of the Euclidean index (padded leaves with bounding boxes,
:class:`~anonflow_std.microaggregation.kernels._Leaves`) bound ``B0`` exactly: per box, ``B0`` at the
smallest possible differences is an upper bound and ``B0`` at the largest ones a lower
bound.  A query computes both bounds for every box at once, evaluates a few promising
leaves for a first answer, then exactly the leaves whose bound can still beat it.

The least similar record to the centroid is found in a list sorted by ``B0`` from an
anchor (:class:`_GreyRadial`): ``B`` is also homogeneous of degree 1 in the coefficients,
which gives ``B0(c, x) >= lambda * B0(anchor, x)`` with ``lambda`` close to 1 when the
centroid has moved little, so only a short prefix of the list is evaluated.

``Dmax`` needs only the per-column extremes of the comparison set (pointers into each
column's sorted order that move inward as records leave; a reference inside the set has
difference 0 to itself, so counting it among the extremes changes nothing); ``Dmin``
(needed by the extension test only) is the smallest distance from the reference to a live
value in any column, found by a window around the reference's position in each column's
sorted values (widened until provably exact; the sorted columns are compacted whenever
half of their entries have left).  Each member of a group being extended keeps its best candidate, ``B0``, ``Dmin``
and ``Dmax``; only when a record leaves that was its candidate or attained its ``Dmin`` or
``Dmax`` is that recomputed (otherwise the values are the numbers a fresh scan gives).

``B >= zeta / (1 + zeta)`` for every comparison record (``B`` is increasing in the
coefficients and every coefficient is at least ``a / (Dmax + a)``), while ``B <= 1``.
Hence ``gamma * b_in > b_out`` can only hold when ``gamma > zeta / (1 + zeta)``: with
seed 003's ``gamma = 0.2`` and ``zeta = 1.8`` (0.643) V-GRAV never extends a group, and
the loop skips the extension queries altogether.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .leaf_index import LeafIndex, sort_by_key
from .similarity import (FAR_LEAVES, MARGIN, NEAR_LEAVES, REBUILD_SCAN, TINY, Best, Extender, FloatArray, Index, IntArray,
                         Similarity)

__all__ = ["Grey", "grey_scores"]

#: first half-width of the Dmin window in each sorted column
_WINDOW = 8


def grey_scores(D: np.ndarray, dmin: float, dmax: float, zeta: float, axis: int = 0) -> FloatArray:
    """Balanced adjacent degrees from absolute differences ``D`` (attributes along ``axis``).

    ``dmin`` and ``dmax`` are the extremes of the differences over the whole comparison set
    (not only the records in ``D``).  Computed as ``min(1, c * B0)`` with
    ``c = (dmin + zeta * dmax) / (zeta * dmax)`` and ``B0`` the degree for ``Dmin = 0``
    (:func:`_degree0`), which equals the definition (the balance degree does not change
    when every coefficient is scaled by ``c``).  NaN differences give NaN.
    """
    D = np.moveaxis(np.asarray(D, dtype=np.float64), axis, 0)
    a = zeta * dmax
    B = _degree0(D, a)
    if a == 0.0:
        return B
    B *= (dmin + a) / a
    return np.minimum(B, 1.0, out=B)


def _degree0(D: np.ndarray, a: float) -> FloatArray:
    """``B0``: the balanced adjacent degree with ``Dmin = 0`` and ``a = zeta * Dmax``.

    ``D`` holds absolute differences with the attributes along the first axis (any
    layout: a transposed view is fine).  With ``r(k) = a / (D_k + a)``, ``S = sum_k r(k)``
    and ``T = sum_k r(k) ln r(k)``, both summed in attribute order,
    ``B0 = min(1, (S ln S - T) / (m ln m))``; ``B0 = min(1, S)`` when ``m = 1`` and 1 when
    ``a = 0`` (every comparison record equals the reference).  A record's value never
    depends on the layout or on the other records evaluated with it.
    """
    m = D.shape[0]
    if a == 0.0:
        out = np.ones(D.shape[1:])
        out[np.isnan(D[0])] = np.nan
        return out
    R = D + a
    np.divide(a, R, out=R)
    S = R[0].copy()
    for j in range(1, m):
        S += R[j]
    if m == 1:
        return np.minimum(S, 1.0, out=S)
    L = np.log(R)
    L *= R
    T = L[0].copy()
    for j in range(1, m):
        T += L[j]
    B = np.log(S)
    B *= S
    B -= T
    B /= m * math.log(m)
    return np.minimum(B, 1.0, out=B)


class Grey(Similarity):
    """The balanced adjacent degree (larger = more similar): GRAV and V-GRAV."""

    name = "grey"

    def __init__(self, zeta: float = 1.8) -> None:
        zeta = float(zeta)
        if not (zeta > 0 and math.isfinite(zeta)):
            raise ValueError(f"zeta must be a finite number > 0, got {zeta!r}")
        self.zeta = zeta

    def prepare(self, x: FloatArray) -> FloatArray:
        """Leave out the attributes constant over the whole table."""
        varying = (x.max(axis=0) > x.min(axis=0)) if x.shape[0] else np.zeros(x.shape[1], bool)
        if varying.all():
            return x
        if not varying.any():
            return np.zeros((x.shape[0], 1))
        return np.ascontiguousarray(x[:, varying])

    def index(self, x: FloatArray) -> Index:
        return _GreyIndex(x, self.zeta)


class _Ref(NamedTuple):
    """A reference point with ``a = zeta * Dmax`` of its comparison set."""

    q: FloatArray
    tiled: FloatArray
    dmax: float
    a: float


class _SortedColumns:
    """Each column's values in sorted order, for exact ``Dmin`` and ``Dmax``.

    ``order[k]`` holds row ids sorted by column ``k`` and ``values[k]`` their values; rows
    that left stay until :meth:`rebuild` (``alive`` tells).  ``lo[k]`` / ``hi[k]`` point at
    the smallest / largest live entry.
    """

    def __init__(self, x: FloatArray, alive: np.ndarray) -> None:
        self.x = x
        self.alive = alive
        self.rebuild()

    def rebuild(self) -> None:
        ids = self.alive.nonzero()[0]
        sub = self.x[ids]
        order = np.argsort(sub, axis=0, kind="stable")
        self.order = np.ascontiguousarray(ids[order].T)
        self.values = np.ascontiguousarray(np.take_along_axis(sub, order, axis=0).T)
        m, size = self.values.shape
        self.size = size
        self.lo = np.zeros(m, dtype=np.int64)
        self.hi = np.full(m, size - 1, dtype=np.int64)
        self.rows = np.arange(m)
        self.offsets = self.rows * size
        self.window = np.arange(-_WINDOW, _WINDOW)
        self.dirty = True

    def extremes(self) -> tuple[FloatArray, FloatArray]:
        """Per-column minimum and maximum over the live rows."""
        if self.dirty:
            alive, order = self.alive, self.order
            lo, hi = self.lo, self.hi
            for k in range(order.shape[0]):
                row = order[k]
                j = int(lo[k])
                while not alive[row[j]]:
                    j += 1
                lo[k] = j
                j = int(hi[k])
                while not alive[row[j]]:
                    j -= 1
                hi[k] = j
            self._min = self.values[self.rows, lo]
            self._max = self.values[self.rows, hi]
            self.dirty = False
        return self._min, self._max

    def dmin(self, q: FloatArray, exclude: int = -1) -> float:
        """``min over live rows (but exclude) and columns k of |x_k - q_k|``."""
        return float(self.dmin_many(q[None, :], exclude)[0])

    def dmin_many(self, Q: FloatArray, exclude: int = -1) -> FloatArray:
        """:meth:`dmin` for every row of ``Q`` (``(r, m)``), vectorized over the rows."""
        values, order, alive, size = self.values, self.order, self.alive, self.size
        r, m = Q.shape
        pos = np.empty((r, m), dtype=np.int64)
        for k in range(m):
            pos[:, k] = values[k].searchsorted(Q[:, k])
        idx = pos[:, :, None] + self.window
        inside = (idx >= 0) & (idx < size)
        flat = np.minimum(np.maximum(idx, 0), size - 1)
        flat += self.offsets[:, None]
        ids = order.take(flat)
        ok = inside & alive[ids]
        if exclude >= 0:
            ok &= ids != exclude
        found = np.abs(values.take(flat) - Q[:, :, None])
        found[~ok] = np.inf
        found = found.min(axis=2)
        # entries outside the window are no nearer than the first one outside on each side
        a = pos - (_WINDOW + 1)
        b = pos + _WINDOW
        left = np.where(a >= 0, Q - values.take(np.maximum(a, 0) + self.offsets), np.inf)
        right = np.where(b < size, values.take(np.minimum(b, size - 1) + self.offsets) - Q, np.inf)
        unsure = found > np.minimum(left, right)
        unsure &= found.min(axis=1, keepdims=True) > 0.0  # a sure 0 settles the row
        for i, k in zip(*unsure.nonzero()):
            found[i, k] = self._column_dmin(int(k), float(Q[i, k]), int(pos[i, k]), exclude)
        return found.min(axis=1)

    def _column_dmin(self, k: int, qk: float, pos: int, exclude: int) -> float:
        """Exact nearest live value in column ``k``: widen the window until it is sure."""
        values, order, alive, size = self.values[k], self.order[k], self.alive, self.size
        w = 4 * _WINDOW
        while True:
            a, b = max(pos - w, 0), min(pos + w, size)
            ids = order[a:b]
            ok = alive[ids]
            if exclude >= 0:
                ok &= ids != exclude
            found = float(np.abs(values[a:b][ok] - qk).min()) if ok.any() else math.inf
            left = qk - values[a - 1] if a > 0 else math.inf
            right = values[b] - qk if b < size else math.inf
            if found <= min(left, right):
                return found
            w *= 4


class _GreyRadial:
    """Remaining records sorted by increasing ``B0`` from an anchor, for "least similar to
    the centroid".

    ``key[i]`` bounds from below ``B0(anchor, ids[i])`` computed with ``a0 = zeta * Dmax``
    at the anchor (exact for the first ``RADIAL_SORTED`` entries).  For a query point
    ``c`` with ``a`` and ``delta = max_k |c_k - anchor_k|``, every coefficient satisfies
    ``r_k(c) >= lam * r_k(anchor)`` with ``lam = min(1, a / a0) * a / (a + delta)`` (per
    coordinate ``|x_k - c_k| <= |x_k - anchor_k| + delta``, and ``a / (d + delta + a) >=
    a / (d + a) * a / (a + delta)``), and ``B`` is increasing and homogeneous of degree 1 in
    the coefficients, so ``B0(c, x) >= lam * B0(anchor, x)``.  A record can only be the
    least similar to ``c`` if ``key <= known / lam``, ``known`` being the exact ``B0`` of
    any live record: a query evaluates that prefix of the list only.
    """

    def __init__(self, x: FloatArray, alive: np.ndarray, zeta: float) -> None:
        self.x = x
        self.alive = alive
        self.zeta = zeta
        self.pos_of = np.zeros(x.shape[0], dtype=np.int64)

    def rebuild(self, anchor: FloatArray, a: float) -> None:
        ids = self.alive.nonzero()[0]
        points = self.x[ids].T
        D = np.abs(points - anchor[:, None])
        self.key, self.ids, self.points = sort_by_key(_degree0(D, a), ids, points, self.pos_of)
        self.anchor = anchor.copy()
        self.a0 = a
        self.head = 0

    def delete(self, ids: IntArray) -> None:
        self.points[:, self.pos_of[ids]] = np.nan

    def least(self, c: FloatArray, a: float) -> int:
        """Row id of the live record of least ``B0`` from ``c`` (ties: the lowest row)."""
        if a == 0.0:  # every live record equals c: all B0 = 1
            return int(self.alive.nonzero()[0][0])
        alive, ids = self.alive, self.ids
        head = self.head
        while not alive[ids[head]]:
            head += 1
        self.head = head
        delta = float(np.abs(c - self.anchor).max())
        lam = min(1.0, a / self.a0) * (a / (a + delta)) if self.a0 > 0 else 0.0
        known = float(_degree0(np.abs(self.points[:, head : head + 1] - c[:, None]), a)[0])
        stop = ids.size
        if lam > 0:
            limit = known / lam * (1.0 + MARGIN) + TINY
            stop = max(head + 1, int(self.key.searchsorted(limit, side="right")))
        with np.errstate(invalid="ignore"):
            b0 = _degree0(np.abs(self.points[:, head:stop] - c[:, None]), a)
        best = np.fmin.reduce(b0)
        hits = (b0 == best).nonzero()[0] + head
        found = int(ids[hits[0]] if hits.size == 1 else ids[hits].min())
        if stop - head > REBUILD_SCAN:
            self.rebuild(c, a)
        return found


class _GreyIndex(LeafIndex):
    """kd leaves bounding ``B0`` per box, exact ``Dmin`` / ``Dmax``, a running centroid."""

    radial: _GreyRadial

    def __init__(self, x: FloatArray, zeta: float) -> None:
        super().__init__(x)
        self.zeta = zeta
        self.m = x.shape[1]
        self.cols = _SortedColumns(x, self.alive)
        self.radial = _GreyRadial(x, self.alive, zeta)
        ref = self._ref(self.sums.centroid())
        self.radial.rebuild(ref.q, ref.a)

    # -- bookkeeping ---------------------------------------------------------------------

    def take(self, ids: IntArray) -> None:
        super().take(ids)
        self.cols.dirty = True

    def _resummed(self) -> None:
        if self.live:
            self.cols.rebuild()

    # -- query machinery -----------------------------------------------------------------

    def _ref(self, q: FloatArray) -> _Ref:
        """``q`` with ``Dmax`` over the live records (the same with or without ``q``)."""
        lo, hi = self.cols.extremes()
        dmax = float(np.maximum(q - lo, hi - q).max())
        return _Ref(q, np.repeat(q, self.leaves.width), dmax, self.zeta * dmax)

    def _bounds(self, ref: _Ref, upper: bool, lower: bool) -> tuple[FloatArray | None, FloatArray | None]:
        """Per box: an upper bound of ``B0`` (smallest differences) and a lower bound."""
        lv = self.leaves
        gap = np.abs(lv.center - ref.q[:, None])
        empty = lv.count == 0
        up = low = None
        with np.errstate(all="ignore"):
            if upper:
                near = gap - lv.half
                np.maximum(near, 0.0, out=near)
                up = _degree0(near, ref.a)
                up[empty] = -np.inf
            if lower:
                far = gap + lv.half
                low = _degree0(far, ref.a)
                low[empty] = np.inf
        return up, low

    def _eval(self, leaves: IntArray, ref: _Ref, exclude: IntArray | int = -1) -> FloatArray:
        """``B0`` for every slot of ``leaves`` (flattened; NaN: empty or excluded)."""
        lv = self.leaves
        diff = lv.xb.take(leaves, axis=0)
        diff -= ref.tiled
        np.abs(diff, out=diff)
        with np.errstate(invalid="ignore"):
            flat = _degree0(diff.reshape(-1, self.m, lv.width).transpose(1, 0, 2), ref.a).reshape(-1)
        if isinstance(exclude, np.ndarray):
            if exclude.size:
                flat[np.isin(lv.orig[leaves].reshape(-1), exclude)] = np.nan
        elif exclude >= 0:
            flat[lv.orig[leaves].reshape(-1) == exclude] = np.nan
        return flat

    def _top(self, ref: _Ref, up: FloatArray, k: int, exclude: int) -> tuple[IntArray, FloatArray]:
        """The ``k`` live records of largest ``B0`` (but ``exclude``), by decreasing ``B0``
        then row; and their ``B0``."""
        lv = self.leaves
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        need = k + (exclude >= 0)
        nbox = up.size
        take = min(NEAR_LEAVES, nbox)
        cols = None
        while take < nbox:
            cand = (-up).argpartition(take)[:take]
            if int(lv.count[cand].sum()) >= need:
                cols = cand
                break
            take = min(2 * take, nbox)
        leaves = lv.bid if cols is None else lv.bid[cols]
        flat = self._eval(leaves, ref, exclude)
        kth = _kth_largest(flat, k)
        if kth != kth:  # fewer than k live records there: take every leaf
            leaves = lv.bid
            flat = self._eval(leaves, ref, exclude)
            kth = _kth_largest(flat, k)
        limit = kth - (abs(kth) * MARGIN + TINY)
        wider = lv.bid[(up >= limit).nonzero()[0]]
        if wider.size > leaves.size:
            leaves = wider
            flat = self._eval(leaves, ref, exclude)
            kth = _kth_largest(flat, k)
        hits = (flat >= kth).nonzero()[0]
        ids = lv.orig[leaves].reshape(-1)[hits]
        vals = flat[hits]
        if hits.size > 1:
            order = np.lexsort((ids, -vals))[:k]
            ids, vals = ids[order], vals[order]
        return ids, vals

    def _bottom(self, ref: _Ref, low: FloatArray, exclude: IntArray | int = -1) -> int:
        """The live record of least ``B0`` (but ``exclude``); ties: the lowest row."""
        lv = self.leaves
        nbox = low.size
        if nbox > FAR_LEAVES:
            first = lv.bid[low.argpartition(FAR_LEAVES)[:FAR_LEAVES]]
        else:
            first = lv.bid
        known = float(np.fmin.reduce(self._eval(first, ref, exclude)))
        if known == known:
            leaves = lv.bid[(low <= known + abs(known) * MARGIN + TINY).nonzero()[0]]
        else:
            leaves = lv.bid
        flat = self._eval(leaves, ref, exclude)
        best = np.fmin.reduce(flat)
        ids = lv.orig[leaves].reshape(-1)[(flat == best).nonzero()[0]]
        return int(ids[0] if ids.size == 1 else ids.min())

    def _degree(self, b0: float, dmin: float, a: float) -> float:
        """``B`` from ``B0``: scale by ``c = (Dmin + a) / a``."""
        return b0 if a == 0.0 else min(1.0, b0 * ((dmin + a) / a))

    # -- the loops' queries ----------------------------------------------------------------

    def farthest_from_centroid(self) -> int:
        self._commit()
        ref = self._ref(self.sums.centroid())
        return self.radial.least(ref.q, ref.a)

    def take_group_and_farthest(self, i: int, k: int) -> tuple[IntArray, int]:
        ref = self._ref(self.x[i])
        up, low = self._bounds(ref, True, True)
        ids, _ = self._top(ref, up, k - 1, exclude=i)
        group = np.concatenate((np.array([i], dtype=np.int64), ids))
        s = self._bottom(ref, low, exclude=group)
        self.take(group)
        return group, s

    def take_nearest(self, i: int, k: int) -> IntArray:
        if k > 1:
            ref = self._ref(self.x[i])
            up, _ = self._bounds(ref, True, False)
            ids, _ = self._top(ref, up, k - 1, exclude=i)
        else:
            ids = np.zeros(0, dtype=np.int64)
        group = np.concatenate((np.array([i], dtype=np.int64), ids))
        self.take(group)
        return group

    def best_of(self, q: FloatArray, exclude: int = -1) -> Best:
        """The live record (but ``exclude``) of largest ``B`` from ``q``, with its ``B``;
        ``state`` is ``(B0, Dmin, Dmax)``."""
        ref = self._ref(q)
        up, _ = self._bounds(ref, True, False)
        ids, vals = self._top(ref, up, 1, exclude)
        b0 = float(vals[0])
        dmin = self.cols.dmin(q, exclude)
        return Best(int(ids[0]), self._degree(b0, dmin, ref.a), (b0, dmin, ref.dmax))

    def best_other(self, i: int) -> Best | None:
        if self.live < 2:
            return None
        return self.best_of(self.x[i], exclude=i)

    def extender(self, members: IntArray) -> Extender:
        return _GreyExtender(self, members)

    def extends(self, inside: float, outside: float, gamma: float) -> bool:
        return gamma * inside > outside

    def never_extends(self, gamma: float) -> bool:
        # B <= 1 and B >= zeta / (1 + zeta): gamma * b_in <= gamma < b_out
        return gamma <= self.zeta / (1.0 + self.zeta) * (1.0 - 1e-9)

    def nearest_group(self, rows: IntArray, centroids: FloatArray) -> IntArray:
        out = np.empty(rows.size, dtype=np.int64)
        for t, row in enumerate(rows):
            D = np.abs(centroids - self.x[row]).T
            B0 = _degree0(D, self.zeta * float(D.max()))
            out[t] = int(np.argmax(B0))  # argmax: first (lowest) index on ties
        return out


def _kth_largest(flat: FloatArray, k: int) -> float:
    """The k-th largest value of ``flat`` ignoring NaN (NaN if there are fewer)."""
    neg = -flat
    return -float(neg[neg.argpartition(k - 1)[k - 1]])


class _GreyExtender(Extender):
    """Each member's most similar unassigned record, with its comparison set's extremes.

    A member's best record (largest ``B0``) stays valid while it remains and ``Dmax`` is
    unchanged; its ``B`` also needs ``Dmin``, recomputed when the record that left may
    have attained it.
    """

    def __init__(self, index: _GreyIndex, members: IntArray) -> None:
        self.index = index
        self.members: list[int] = []
        self.best: list[int] = []
        self.value: list[float] = []
        self.b0: list[float] = []
        self.dmin: list[float] = []
        self.dmax: list[float] = []
        self.taken: int = -1
        for g in members.tolist():
            self._append(g, index.best_of(index.x[g]))

    def _append(self, g: int, found: Best) -> None:
        b0, dmin, dmax = found.state  # type: ignore[misc]
        self.members.append(g)
        self.best.append(found.id)
        self.value.append(found.value)
        self.b0.append(b0)
        self.dmin.append(dmin)
        self.dmax.append(dmax)

    def _set(self, t: int, found: Best) -> None:
        b0, dmin, dmax = found.state  # type: ignore[misc]
        self.best[t], self.value[t], self.b0[t] = found.id, found.value, b0
        self.dmin[t], self.dmax[t] = dmin, dmax

    def candidate(self) -> Best:
        index = self.index
        e = self.taken
        if e >= 0:
            # e left the comparison set: update whoever it may have affected
            x = index.x
            diff = np.abs(x[self.members] - x[e])
            near, far = diff.min(axis=1), diff.max(axis=1)
            lo, hi = index.cols.extremes()
            stale: list[int] = []
            for t in range(len(self.members)):
                g = self.members[t]
                if g == e or (self.best[t] != e and near[t] > self.dmin[t] and far[t] < self.dmax[t]):
                    continue  # same Dmin, Dmax and best: the numbers a fresh scan gives
                q = x[g]
                dmax = float(np.maximum(q - lo, hi - q).max())
                if self.best[t] == e or dmax != self.dmax[t]:
                    self._set(t, index.best_of(q))
                else:
                    stale.append(t)  # only Dmin may have changed
            if stale:
                dmins = index.cols.dmin_many(x[[self.members[t] for t in stale]])
                for t, dmin in zip(stale, dmins.tolist()):
                    if dmin != self.dmin[t]:
                        self.dmin[t] = dmin
                        self.value[t] = index._degree(self.b0[t], dmin, index.zeta * self.dmax[t])
            self.taken = -1
        value = np.array(self.value)
        best = np.array(self.best)
        top = value.max()
        return Best(int(best[value == top].min()), float(top))

    def add(self, record: int, other: Best) -> None:
        self._append(record, other)
        self.taken = record
