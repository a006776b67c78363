"""Local search that lowers the SSE of a microaggregation partition (the ``refine`` plugin).

Starting from any partition whose groups have at least ``k`` records, the search improves
it with two kinds of step, keeping every group within ``k .. upper`` records
(``upper = 2k - 1`` by default; a group above ``upper`` on input -- such as a V-MDAV group
that took leftovers -- may lose records but never gains one):

* **move** record ``i`` from its group ``a`` to another group ``b`` -- allowed while
  ``|G_a| > k`` and ``|G_b| < upper``.  With ``n_a = |G_a|`` and ``c_a`` its centroid::

      dSSE = n_b / (n_b + 1) * |x_i - c_b|^2  -  n_a / (n_a - 1) * |x_i - c_a|^2

* **swap** record ``i`` of ``a`` with record ``j`` of ``b`` (sizes unchanged)::

      dSSE = |x_j - c_a|^2 - |x_i - c_a|^2 - |x_i - x_j|^2 / n_a
           + |x_i - c_b|^2 - |x_j - c_b|^2 - |x_i - x_j|^2 / n_b

Both are exact (expand ``SSE_G = sum |x|^2 - n |c|^2``).  For record ``i`` one vectorized
pass evaluates the move to each of the ``neighbours`` groups whose centroids are nearest
to ``i`` and the swap with every member of those groups; the best step is applied if it
lowers the SSE by more than ``1e-12 * SST`` (so rounding never makes the search cycle).

1. **Descent.**  A *round* visits every record once, in an order drawn from the caller's
   seeded generator, with the candidate groups of the centroids at the round's start.
   Rounds repeat until one improves nothing (a local optimum: no single move or swap to
   a neighbouring group helps), for at most ``rounds`` rounds.  A record whose last
   evaluation found nothing is skipped while its group and candidate groups stay unchanged
   (evaluating it would find nothing again).
2. **Kicks** (iterated local search, Laszlo & Mukherjee 2015; seed 003's reference 9).
   From the local optimum, ``kicks`` times: pick a group ``a`` at random and one of its
   ``neighbours`` nearest groups ``b``, pool their records, deal them out again at random
   (sizes kept), and descend again from the records of the groups that change (a
   worklist: the two groups' records, then the records of every group a step touches).
   The result is kept if its SSE is lower, otherwise every step is undone.

The search also stops once ``seconds`` have passed (checked every 256 records and every
kick) -- then the result depends on the machine's speed, which the plugin reports.
Centroids are kept as running sums, re-summed at every round and every 64 kicks.  The
result's SSE is recomputed from scratch and is never above the input's (if rounding ever
said otherwise, the input is returned).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["RefineResult", "refine_partition", "sse"]

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: records visited between two looks at the clock
_CLOCK_EVERY = 256
#: kicks between two re-summations of the centroid sums
_RESUM_EVERY = 64


@dataclass
class RefineResult:
    """What :func:`refine_partition` did."""

    labels: IntArray
    sse_before: float
    sse_after: float
    rounds: int = 0
    kicks: int = 0
    kicks_kept: int = 0
    moves: int = 0
    swaps: int = 0
    #: "converged" (descent only), "kicks", "rounds" or "seconds"
    stopped_by: str = "converged"
    #: SSE after the descent (before the kicks)
    sse_descent: float = 0.0


def sse(Z: FloatArray, labels: IntArray) -> float:
    """Sum over records of the squared distance to their group's centroid."""
    counts = np.bincount(labels).astype(np.float64)
    safe = np.where(counts > 0, counts, 1.0)
    total = 0.0
    for j in range(Z.shape[1]):
        means = np.bincount(labels, weights=Z[:, j], minlength=counts.size) / safe
        diff = Z[:, j] - means[labels]
        total += float(diff @ diff)
    return total


class _Search:
    """The partition as padded member slots, sizes and centroid sums, with the steps."""

    def __init__(self, Z: FloatArray, lab: IntArray, k: int, upper: int, neighbours: int, tol: float) -> None:
        self.Z = Z
        self.n, self.d = Z.shape
        self.lab = lab
        self.k = k
        self.upper = upper
        self.tol = tol
        G = int(lab.max()) + 1
        self.G = G
        self.sizes = np.bincount(lab, minlength=G).astype(np.int64)
        self.neighbours = min(neighbours, G - 1)
        cap = max(int(self.sizes.max()), upper)
        self.slots = np.full((G, cap), -1, dtype=np.int64)
        self.slot_of = np.empty(self.n, dtype=np.int64)
        order = np.argsort(lab, kind="stable")
        starts = np.cumsum(self.sizes) - self.sizes
        pos = np.arange(self.n) - np.repeat(starts, self.sizes)
        self.slots[lab[order], pos] = order
        self.slot_of[order] = pos
        self.sums = np.zeros((G, self.d))
        self.resum()
        self.sq = np.einsum("ij,ij->i", Z, Z)
        self.rows_of = np.repeat(np.arange(self.neighbours + 1), cap)
        self.moves = 0
        self.swaps = 0
        #: a step counter, the step at which each group last changed (for skipping records
        #: whose last evaluation found nothing and whose groups have not changed since)
        self.clock = 1
        self.changed_at = np.zeros(G, dtype=np.int64)
        self.log: list[tuple[int, int, int]] | None = None  # undo log while kicking

    def resum(self) -> None:
        for j in range(self.d):
            self.sums[:, j] = np.bincount(self.lab, weights=self.Z[:, j], minlength=self.G)

    def centroids(self) -> FloatArray:
        return self.sums / self.sizes[:, None]

    def nearest_groups(self, points: FloatArray) -> IntArray:
        """For each point, the ``neighbours + 1`` nearest centroids."""
        from scipy.spatial import cKDTree

        count = self.neighbours + 1
        _, idx = cKDTree(self.centroids()).query(points, k=count)
        return np.asarray(idx, dtype=np.int64).reshape(points.shape[0], count)

    # -- steps ---------------------------------------------------------------------------

    def improve(self, i: int, cand: IntArray) -> tuple[int, int, float] | None:
        """Apply the best improving move or swap of record ``i`` into the groups ``cand``;
        return the two groups changed and the SSE change (or None).

        The swap deltas are expanded into dot products (one small matrix product for all
        partners); their rounding error is far below the acceptance margin ``tol``.
        """
        Z, sizes, sums = self.Z, self.sizes, self.sums
        a = int(self.lab[i])
        cand = cand[cand != a]
        m = cand.size
        if m == 0:
            return None
        x = Z[i]
        na = float(sizes[a])
        ca = sums[a] / na
        nb = sizes[cand].astype(np.float64)
        cb = sums[cand] / nb[:, None]
        refs = np.empty((m + 2, self.d))
        refs[0] = x
        refs[1] = ca
        refs[2:] = cb
        sq_refs = np.einsum("ij,ij->i", refs, refs)
        cross = refs @ x  # x.x, x.c_a, x.c_b
        d2a = sq_refs[0] - 2.0 * cross[1] + sq_refs[1]
        d2b = sq_refs[0] - 2.0 * cross[2:] + sq_refs[2:]
        best, target, partner = -self.tol, -1, -1
        if sizes[a] > self.k:
            ok = sizes[cand] < self.upper  # a group above upper never gains
            if ok.any():
                delta = nb / (nb + 1.0) * d2b - na / (na - 1.0) * d2a
                delta[~ok] = np.inf
                t = int(np.argmin(delta))
                if delta[t] < best:
                    best, target = float(delta[t]), int(cand[t])
        J = self.slots[cand].reshape(-1)
        valid = J >= 0
        jj = J[valid]
        bb = self.rows_of[: J.size][valid]
        dots = Z[jj] @ refs.T  # x_j.x, x_j.c_a, x_j.c_b for every candidate group
        sq_j = self.sq[jj]
        d2ij = sq_refs[0] + sq_j - 2.0 * dots[:, 0]
        dja = sq_j - 2.0 * dots[:, 1] + sq_refs[1]
        djb = sq_j - 2.0 * dots[np.arange(jj.size), bb + 2] + sq_refs[2:][bb]
        delta = dja - d2a - d2ij / na + d2b[bb] - djb - d2ij / nb[bb]
        t = int(np.argmin(delta))
        if delta[t] < best:
            best, target, partner = float(delta[t]), int(cand[bb[t]]), int(jj[t])
        if target < 0:
            return None
        if partner < 0:
            self.move(i, target)
            self.moves += 1
        else:
            self.swap(i, partner)
            self.swaps += 1
        return a, target, best

    def move(self, i: int, b: int) -> None:
        """Record ``i`` leaves its group for ``b`` (slots stay compact)."""
        a = int(self.lab[i])
        slots, slot_of = self.slots, self.slot_of
        si = slot_of[i]
        last = slots[a, self.sizes[a] - 1]
        slots[a, si] = last
        slot_of[last] = si
        slots[a, self.sizes[a] - 1] = -1
        slots[b, self.sizes[b]] = i
        slot_of[i] = self.sizes[b]
        self.sizes[a] -= 1
        self.sizes[b] += 1
        x = self.Z[i]
        self.sums[a] -= x
        self.sums[b] += x
        self.lab[i] = b
        self.clock += 1
        self.changed_at[a] = self.changed_at[b] = self.clock
        if self.log is not None:
            self.log.append((0, i, a))

    def swap(self, i: int, j: int) -> None:
        """Records ``i`` and ``j`` exchange groups."""
        a, b = int(self.lab[i]), int(self.lab[j])
        si, sj = self.slot_of[i], self.slot_of[j]
        self.slots[a, si] = j
        self.slots[b, sj] = i
        self.slot_of[i], self.slot_of[j] = sj, si
        delta = self.Z[j] - self.Z[i]
        self.sums[a] += delta
        self.sums[b] -= delta
        self.lab[i], self.lab[j] = b, a
        self.clock += 1
        self.changed_at[a] = self.changed_at[b] = self.clock
        if self.log is not None:
            self.log.append((1, i, j))

    def undo(self, log: list[tuple[int, int, int]]) -> None:
        for kind, i, other in reversed(log):
            if kind == 0:
                self.move(i, other)
            else:
                self.swap(i, other)

    def group_sse(self, groups: list[int]) -> float:
        total = 0.0
        for g in groups:
            members = self.slots[g, : self.sizes[g]]
            diff = self.Z[members] - self.sums[g] / self.sizes[g]
            total += float(np.einsum("ij,ij->", diff, diff))
        return total


def refine_partition(
    Z: np.ndarray,
    labels: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    upper: int | None = None,
    neighbours: int = 8,
    rounds: int = 100,
    kicks: int = 0,
    seconds: float = 60.0,
) -> RefineResult:
    """Improve ``labels`` (any integer group ids) on the z-scored ``Z`` by moves and swaps.

    Every group must have at least ``k`` records.  Returns group ids ``0 .. g - 1`` (in
    the order of the input's sorted ids; no group is ever emptied).
    """
    Z = np.ascontiguousarray(Z, dtype=np.float64)
    n, d = Z.shape
    _, lab = np.unique(np.asarray(labels), return_inverse=True)
    lab = lab.astype(np.int64).reshape(-1)
    sizes = np.bincount(lab)
    if k < 1 or sizes.min() < k:
        raise ValueError(f"every group must have at least k = {k} records (smallest: {int(sizes.min())})")
    upper = 2 * k - 1 if upper is None else int(upper)
    before = sse(Z, lab)
    result = RefineResult(labels=lab.copy(), sse_before=before, sse_after=before, sse_descent=before)
    if sizes.size < 2:
        return result
    sst = float(((Z - Z.mean(axis=0)) ** 2).sum())
    state = _Search(Z, lab.copy(), k, upper, neighbours, 1e-12 * max(sst, 1e-300))
    start = time.perf_counter()

    def out_of_time() -> bool:
        return time.perf_counter() - start > seconds

    # 1. descent: full rounds in a seeded order
    result.stopped_by = "rounds"
    # A record whose last evaluation found no step, whose candidate groups are the same and
    # none of whose groups changed since, would find none again: it is skipped (exactly the
    # result of evaluating it, much faster in the later rounds).
    evaluated_at = np.zeros(n, dtype=np.int64)
    near = None
    for r in range(rounds):
        state.resum()
        previous, near = near, state.nearest_groups(Z)
        same = np.zeros(n, dtype=bool) if previous is None else (near == previous).all(axis=1)
        changed_at = state.changed_at
        improved = 0
        timed_out = False
        for step, i in enumerate(rng.permutation(n).tolist()):
            if step % _CLOCK_EVERY == 0 and out_of_time():
                timed_out = True
                break
            seen = evaluated_at[i]
            if seen and same[i] and seen >= changed_at[state.lab[i]] and seen >= changed_at[near[i]].max():
                continue
            if state.improve(i, near[i]) is not None:
                improved += 1
            else:
                evaluated_at[i] = state.clock
        result.rounds = r + 1
        if timed_out:
            result.stopped_by = "seconds"
            break
        if improved == 0:
            result.stopped_by = "converged"
            break
    result.sse_descent = sse(Z, state.lab)

    # 2. kicks: perturb two neighbouring groups, descend locally, keep if better
    if kicks > 0 and result.stopped_by == "converged" and state.neighbours > 0:
        result.stopped_by = "kicks"
        slots, sizes_ = state.slots, state.sizes
        for t in range(kicks):
            if out_of_time():
                result.stopped_by = "seconds"
                break
            if t % _RESUM_EVERY == 0:
                state.resum()
                near = state.nearest_groups(Z)
            a = int(rng.integers(state.G))
            cent = state.centroids()
            diff = cent - cent[a]
            dist = np.einsum("ij,ij->i", diff, diff)
            dist[a] = np.inf
            close = np.argpartition(dist, state.neighbours - 1)[: state.neighbours]
            b = int(np.sort(close)[rng.integers(close.size)])
            old = state.group_sse([a, b])
            state.log = log = []
            members_a = slots[a, : sizes_[a]].copy()
            pool = np.concatenate((members_a, slots[b, : sizes_[b]]))
            new_a = rng.permutation(pool)[: sizes_[a]]
            incoming = new_a[state.lab[new_a] == b]
            outgoing = members_a[~np.isin(members_a, new_a)]
            for i, j in zip(incoming.tolist(), outgoing.tolist()):
                state.swap(i, j)
            change = state.group_sse([a, b]) - old
            queue = deque(rng.permutation(np.concatenate((slots[a, : sizes_[a]], slots[b, : sizes_[b]]))).tolist())
            waiting = set(queue)
            while queue:
                i = queue.popleft()
                waiting.discard(i)
                step = state.improve(i, near[i])
                if step is None:
                    continue
                change += step[2]
                for g in step[:2]:
                    for m in slots[g, : sizes_[g]].tolist():
                        if m not in waiting:
                            waiting.add(m)
                            queue.append(m)
            state.log = None
            result.kicks = t + 1
            if change < -state.tol:
                result.kicks_kept += 1
            else:
                state.undo(log)
    result.labels = state.lab
    after = sse(Z, state.lab)
    result.moves, result.swaps = state.moves, state.swaps
    if after <= before:
        result.labels, result.sse_after = state.lab, after
    else:
        result.labels, result.sse_after = lab, before
    return result
