"""L-clustering for distinct l-diversity (seed 001, SPEC section 5).

Algorithm ``l-clustering``: greedy agglomerative clustering on hierarchy-free generalized
values (intervals for ordered QIs, sets for unordered ones) with the loss-based distances DS
of :mod:`anonflow_std.common.generalized`. Its loss metrics, ``generalization-loss`` and
``relative-loss``, are in :mod:`anonflow_std.utility.generalized_loss`; they read the
records through the QI space defined here (:func:`qi_space`).

How each greedy step stays vectorized (no Python loop over records):

* **Distinct QI tuples, not records.** DS(t, G) depends on t's QI values only, so the
  candidates are the distinct QI tuples (16,581 for Adult's 8 QIs, 145 for 2). Per tuple, a
  bitset of the sensitive values it still has unused records of makes "S not in G" one
  ``&`` per tuple; records are kept in buckets (tuple, S value), so choosing the record is
  O(1). Exhausted tuples are masked (``inf``) and dropped only when they are half of the
  array (geometric compaction, order kept).
* **All candidates at once through per-attribute tables** (:class:`_RecordDS`): DS(t, G) is
  a sum over attributes of terms that depend on t's value of that attribute only, so each
  step evaluates the kernel's :func:`join` and :func:`attribute_loss` on a grid of every
  attribute's distinct values and gathers the (joint) tables for all candidates.
* **All formed classes at once** with :func:`ds_classes` on capacity-doubling buffers the
  kernel reads in place (free slots hold the whole domain and are masked; a merge writes the
  merged class into the slot of the class it absorbed), pruned by an exact lower bound: DS
  over the ordered attributes alone (:meth:`_Classes.nearest`).
* **Exact shortcut.** DS(t, G) = 0 iff t equals G's representative; when every member of G
  shares one QI tuple that still has an eligible record, that record is the argmin (the
  only tuple at distance 0) and, since ties go to the record, no class can beat it: the step
  needs no DS call at all. Attributes of weight 0 never change a distance, so the
  clustering runs on the positive-weight attributes (keeping the shortcut exact); the
  published representatives cover every QI.

The tests compare the result with a literal implementation (DS over every remaining record
and every class with the kernels, record by record): the classes are identical.

Ties (SPEC leaves them open): equal DS among candidate tuples go to the first tuple of a
seeded random order of the distinct tuples; among a tuple's eligible records, to the
sensitive value with the most unused records (it keeps rare values for later classes;
ties to the smallest value), then to the lowest source position; equal DS among classes
go to the earliest slot; DS(t', G) = DS(G', G) adds the record (the seed's ``<=``).

Choices where SPEC leaves room are listed in ``docs/algorithms.md`` (section
``l-clustering``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import GENERALIZATION_OPTION as GENERALIZED
from anonflow.api import (CLASS, Algorithm, Attribute, InputError, Param, StepContext, TypedTable, interval_labels,
                          mark_generalized, set_labels)
from anonflow_std.common.ds_distance import DSWorkspace, ds_classes, ds_record_class
from anonflow_std.common.encode import encode
from anonflow_std.common.generalized import Domain, Generalized, attribute_loss, join, to_arrow
from anonflow_std.common.qi_space import ORDERED, QISpace, check_quasi, qi_resolutions, qi_space, qi_weights

from .. import __version__
from ..common.columns import join_nearest, missing_sensitive, sensitive_attribute, sensitive_codes

__all__ = ["LClustering", "l_clustering"]

#: suffixes of the structured columns published next to each readable QI column.
LO, HI, SET = "_lo", "_hi", "_set"
#: key of a published QI's ``Attribute.options`` that describes its structured columns
#: (the convention of :mod:`anonflow.generalization`).
OPTION = GENERALIZED
_ONE = np.uint64(1)
#: DS values are rounded to this many decimals before comparing: values equal up to the
#: summation order (the tables and the kernels add the attributes' terms differently) tie.
DIGITS = 9
#: candidate arrays shorter than this are never compacted (tests set it to 0).
COMPACT_MIN = 256


# -- the QI space: records as generalized values ----------------------------------------------


def _subdomain(domain: Domain, keep_ord: np.ndarray, keep_un: np.ndarray) -> Domain:
    return Domain(res=domain.res[keep_ord], dmin=domain.dmin[keep_ord], dmax=domain.dmax[keep_ord],
                  card=domain.card[keep_un], w_ord=domain.w_ord[keep_ord], w_unord=domain.w_unord[keep_un],
                  ordered_names=tuple(np.array(domain.ordered_names, dtype=object)[keep_ord]),
                  unordered_names=tuple(np.array(domain.unordered_names, dtype=object)[keep_un]))


# -- the algorithm on arrays --------------------------------------------------------------------


class _Classes:
    """The formed classes Q: representatives in capacity-doubling buffers read in place by
    the DS kernels. Slots ``0..count-1`` hold classes; free slots hold the whole domain
    (never a point, nor a singleton set, unless the domain itself is one) with count 0, so
    the kernels' cached shape flags stay true for every later content.

    :meth:`nearest` prunes with an exact lower bound: DS is a sum of nonnegative
    per-attribute terms, so DS over the ordered attributes alone (a view ``gb`` of the same
    interval buffers) bounds it from below; only the classes whose bound is below the
    threshold (typically a few percent) are evaluated in full.
    """

    MIN_PRUNE = 256

    def __init__(self, domain: Domain, capacity: int, limit: int) -> None:
        self.domain = domain
        self.limit = limit
        self.count = 0
        self._full = Generalized.full(domain, count=0)
        self.bound_domain = None
        if 0 < domain.d_ord and domain.d_unord:
            self.bound_domain = _subdomain(domain, np.ones(domain.d_ord, bool), np.zeros(domain.d_unord, bool))
        self._alloc(max(2, min(capacity, limit)))

    def _alloc(self, cap: int) -> None:
        d = self.domain
        lo = np.empty((cap, d.d_ord), order="F")
        hi = np.empty((cap, d.d_ord), order="F")
        bits = np.empty((cap, d.d_unord, d.n_words), dtype=np.uint64, order="F")
        sizes = np.empty((cap, d.d_unord), dtype=self._full.sizes.dtype, order="F")
        counts = np.zeros(cap, dtype=np.int64)
        lo[:] = self._full.lo
        hi[:] = self._full.hi
        bits[:] = self._full.bits
        sizes[:] = self._full.sizes
        c = self.count
        if c:
            old = self.g
            lo[:c], hi[:c], bits[:c], sizes[:c], counts[:c] = old.lo[:c], old.hi[:c], old.bits[:c], \
                old.sizes[:c], old.counts[:c]
        self.g = Generalized(lo, hi, bits, counts, sizes=sizes)
        assert all(a.size == 0 or np.shares_memory(a, b) for a, b in (
            (self.g.lo, lo), (self.g.hi, hi), (self.g.bits, bits), (self.g.counts, counts), (self.g.sizes, sizes)))
        self.inv = self.g.inv_sizes  # computed once, then kept current slot by slot
        self.gb = None
        if self.bound_domain is not None:
            self.gb = Generalized(lo, hi, np.zeros((cap, 0, 1), np.uint64), counts)
            assert all(np.shares_memory(a, b) for a, b in (
                (self.gb.lo, lo), (self.gb.hi, hi), (self.gb.counts, counts)))
        self.cap = cap
        self.work = DSWorkspace(cap, d)
        self.out = np.empty(cap)
        if self.gb is not None:
            self.work_b = DSWorkspace(cap, self.bound_domain)

    def set(self, k: int, rep: Generalized) -> None:
        g = self.g
        g.lo[k], g.hi[k], g.bits[k], g.sizes[k], g.counts[k] = rep.lo[0], rep.hi[0], rep.bits[0], rep.sizes[0], \
            rep.counts[0]
        self.inv[k] = 1.0 / rep.sizes[0]

    def add_record(self, k: int, t: Generalized) -> None:
        g = self.g
        np.minimum(g.lo[k], t.lo[0], out=g.lo[k])
        np.maximum(g.hi[k], t.hi[0], out=g.hi[k])
        np.bitwise_or(g.bits[k], t.bits[0], out=g.bits[k])
        g.counts[k] += 1
        g.sizes[k] = np.bitwise_count(g.bits[k]).sum(axis=-1)
        self.inv[k] = 1.0 / g.sizes[k]

    def append(self, rep: Generalized) -> int:
        if self.count + 1 >= self.cap:  # always keep a free slot (see the class docstring)
            self._alloc(min(2 * self.cap, self.limit))
        k = self.count
        self.count += 1
        self.set(k, rep)
        return k

    def rep(self, k: int) -> Generalized:
        g = self.g
        return Generalized(g.lo[k:k + 1], g.hi[k:k + 1], g.bits[k:k + 1], g.counts[k:k + 1],
                           sizes=g.sizes[k:k + 1])

    def nearest(self, G: Generalized, below: float = np.inf) -> tuple[int, float]:
        """``argmin_k DS(G_k, G)`` and its value, looking only for values ``< below``
        (returns ``(-1, inf)`` when no class is that close); ties to the earliest slot."""
        c = self.count
        if self.gb is None or c < self.MIN_PRUNE or not np.isfinite(below):
            dq = ds_classes(self.g, G, self.domain, work=self.work, out=self.out)
            dq[c:] = np.inf
            np.round(dq, DIGITS, out=dq)
            k = int(np.argmin(dq))
            return (k, float(dq[k])) if dq[k] < below else (-1, np.inf)
        gb = Generalized(G.lo, G.hi, np.zeros((1, 0, 1), np.uint64), G.counts)
        lb = ds_classes(self.gb, gb, self.bound_domain, work=self.work_b, out=self.out)
        # the bound is a partial sum of DS's terms; the slack absorbs rounding differences
        idx = np.flatnonzero(lb[:c] < below + 1e-9 * max(1.0, below))
        if idx.size == 0:
            return -1, np.inf
        dq = ds_classes(self.g.take(idx), G, self.domain, work=self.work, out=self.out[:idx.size])
        np.round(dq, DIGITS, out=dq)
        j = int(np.argmin(dq))
        return (int(idx[j]), float(dq[j])) if dq[j] < below else (-1, np.inf)


class _RecordDS:
    """DS(t, G) of one class G against every candidate QI tuple, through per-attribute tables.

    DS is a sum over attributes of a term that depends on t's value of that attribute only
    (Def. 13-15: ``w_a (L(t_a, t_g*_a) + |G| L(t_ga, t_g*_a))``). So each step evaluates the
    kernel's :func:`join` and :func:`attribute_loss` once on a grid ``V`` holding every
    distinct value of every attribute (row j = the j-th value of each attribute), sums the
    per-attribute tables of a few attributes into joint tables (outer sums, at most
    ``JOINT`` entries each) and gathers them for all candidates: a handful of ``take`` calls
    instead of a pass per attribute over every candidate. ``tests/plugins/clustering/test_lclustering.py``
    checks it against :func:`ds_record_class`.
    """

    JOINT = 4096

    def __init__(self, values: np.ndarray, codes: np.ndarray, domain: Domain) -> None:
        self.domain = domain
        grids, idx, sizes = [], [], []
        for a in range(domain.d_ord):
            vals, inv = np.unique(values[:, a], return_inverse=True)
            grids.append(vals)
            idx.append(inv.reshape(-1))
            sizes.append(vals.shape[0])
        for j in range(domain.d_unord):
            m = int(domain.card[j])
            grids.append(np.arange(m))
            idx.append(codes[:, j].astype(np.int64))
            sizes.append(m)
        M = max(sizes)
        do = domain.d_ord
        gv = np.empty((M, do))
        gc = np.empty((M, domain.d_unord), dtype=np.int64)
        for a, g in enumerate(grids):
            col = g[np.minimum(np.arange(M), g.shape[0] - 1)]
            if a < do:
                gv[:, a] = col
            else:
                gc[:, a - do] = col
        self.V = Generalized.from_records(gv, gc, domain)
        self.w = np.concatenate([domain.w_ord, domain.w_unord])
        # blocks of attributes whose joint table stays small; joint code per tuple and block
        self.blocks: list[list[int]] = []
        for a, m in enumerate(sizes):
            if self.blocks and np.prod([sizes[b] for b in self.blocks[-1]]) * m <= self.JOINT:
                self.blocks[-1].append(a)
            else:
                self.blocks.append([a])
        self.sizes = sizes
        self.codes = []
        for blk in self.blocks:
            code = np.zeros(values.shape[0], dtype=np.intp)
            for a in blk:
                code = code * sizes[a] + idx[a]
            self.codes.append(code)
        self.cur = list(self.codes)

    def keep(self, index: np.ndarray) -> None:
        """Restrict the candidates to the tuples ``index`` (in this order)."""
        self.cur = [c[index] for c in self.codes]

    def __call__(self, g: Generalized, out: np.ndarray, tmp: np.ndarray) -> np.ndarray:
        tstar = join(self.V, g)
        lv_o, lv_u = attribute_loss(self.V, tstar, self.domain)
        lg_o, lg_u = attribute_loss(g, tstar, self.domain)
        size = float(g.counts[0])
        tab = np.concatenate([lv_o + size * lg_o, lv_u + size * lg_u], axis=1)
        tab *= self.w
        for b, blk in enumerate(self.blocks):
            joint = tab[:self.sizes[blk[0]], blk[0]]
            for a in blk[1:]:
                joint = np.add.outer(joint, tab[:self.sizes[a], a]).reshape(-1)
            if b == 0:
                np.take(joint, self.cur[b], out=out)
            else:
                np.take(joint, self.cur[b], out=tmp)
                out += tmp
        return out


def _one(lo: np.ndarray, hi: np.ndarray, bits: np.ndarray, count: int) -> Generalized:
    return Generalized(lo[None, :], hi[None, :], bits[None, :, :], [count])


def l_clustering(values: np.ndarray, codes: np.ndarray, sensitive: np.ndarray, l: int, domain: Domain,
                 rng: np.random.Generator, *, order: np.ndarray | None = None,
                 priority: np.ndarray | None = None,
                 progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, dict[str, int]]:
    """Run L-clustering (SPEC section 5, steps 1-3) and return each record's class (0-based,
    consecutive) and counters.

    ``values`` ``(n, d_ord)`` and ``codes`` ``(n, d_unord)`` as in
    :meth:`Generalized.from_records`; ``sensitive`` ``(n,)`` integer codes of S. Randomness:
    the records are drawn in the order of ``order`` (default a seeded permutation: "draw t at
    random" = the next unused record of it, for step 2's starts and step 3's leftovers); ties
    between candidate QI tuples go to the smaller ``priority`` of the distinct tuples in sort
    order (default a seeded random permutation). Attributes of weight 0 are ignored (they
    change no distance).
    """
    values = np.asarray(values, dtype=np.float64).reshape(len(sensitive), domain.d_ord)
    codes = np.asarray(codes, dtype=np.int64).reshape(len(sensitive), domain.d_unord)
    s = np.asarray(sensitive, dtype=np.int64)
    n = s.shape[0]
    if l < 2:
        raise ValueError("l must be at least 2")
    n_s = int(s.max()) + 1 if n else 0
    scount = np.bincount(s, minlength=n_s).astype(np.int64)
    distinct = int(np.count_nonzero(scount))
    if distinct < l:
        raise ValueError(f"{distinct} distinct sensitive values, fewer than l = {l}")
    keep_ord, keep_un = domain.w_ord > 0, domain.w_unord > 0
    if not (keep_ord.any() or keep_un.any()):
        raise ValueError("at least one QI weight must be positive")
    if not (keep_ord.all() and keep_un.all()):
        domain = _subdomain(domain, keep_ord, keep_un)
        values, codes = values[:, keep_ord], codes[:, keep_un]

    # distinct QI tuples, numbered in tie-breaking priority order
    key = np.concatenate([values, codes.astype(np.float64)], axis=1)
    _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    U = first.shape[0]
    if priority is None:
        priority = rng.permutation(U)
    priority = np.asarray(priority, dtype=np.int64)
    tid = priority[inv]                       # tuple id of each record, 0 = first in priority
    rep_row = np.empty(U, dtype=np.int64)
    rep_row[priority] = first
    rds = _RecordDS(values[rep_row], codes[rep_row], domain)
    R = Generalized.from_records(values, codes, domain)

    # records in buckets (tuple, S value), each bucket in source order
    border = np.lexsort((np.arange(n), s, tid))
    bk = tid[border] * max(n_s, 1) + s[border]
    bstart = np.flatnonzero(np.concatenate(([True], bk[1:] != bk[:-1])))
    bend = np.append(bstart[1:], n)
    bucket = np.empty(n, dtype=np.int64)
    bucket[border] = np.cumsum(np.concatenate(([0], (bk[1:] != bk[:-1]).astype(np.int64))))
    b_tid, b_s = tid[border[bstart]], s[border[bstart]]
    b_avail = (bend - bstart).astype(np.int64)
    b_ptr = bstart.copy()
    u_b0 = np.searchsorted(b_tid, np.arange(U), side="left")
    u_b1 = np.searchsorted(b_tid, np.arange(U), side="right")
    u_avail = np.bincount(tid, minlength=U).astype(np.int64)
    Ws = max(1, -(-n_s // 64))
    smask = np.zeros((U, Ws), dtype=np.uint64)
    np.bitwise_or.at(smask, (b_tid, b_s >> 6), np.left_shift(_ONE, (b_s & 63).astype(np.uint64)))
    if Ws == 1:
        smask = smask[:, 0].copy()

    # Python ints for the per-record bookkeeping (numpy scalars are slow in tight loops)
    s_l, tid_l, bucket_l, border_l = s.tolist(), tid.tolist(), bucket.tolist(), border.tolist()
    b_s_l, b_ptr_l, b_avail_l = b_s.tolist(), b_ptr.tolist(), b_avail.tolist()
    u_b0_l, u_b1_l, u_avail_l = u_b0.tolist(), u_b1.tolist(), u_avail.tolist()
    scount_l = scount.tolist()
    used = bytearray(n)

    cur = np.arange(U, dtype=np.int64)        # tuples still in the candidate array, in order
    pos = np.arange(U, dtype=np.int64)        # position of each tuple in ``cur``
    alive = U
    limit = n // l + 2
    Q = _Classes(domain, 1024, limit)
    rbuf = np.empty(U)
    rtmp = np.empty(U)
    andbuf = np.empty(U, dtype=np.uint64)
    zero = np.empty(U, dtype=bool)
    inf = np.inf
    labels = np.full(n, -1, dtype=np.int64)
    stats = {"classes": 0, "merges": 0, "leftovers": 0, "shortcuts": 0, "steps": 0}
    if order is None:
        order = rng.permutation(n)
    order_l = np.asarray(order, dtype=np.int64).tolist()
    assigned = [0, 0]  # records assigned, records reported to ``progress``

    def tick() -> None:
        assigned[0] += 1
        if progress is not None and assigned[0] - assigned[1] >= 1024:
            progress(assigned[0] - assigned[1])
            assigned[1] = assigned[0]

    def take(r: int) -> None:
        nonlocal distinct, alive
        used[r] = 1
        b = bucket_l[r]
        b_avail_l[b] -= 1
        u = tid_l[r]
        if b_avail_l[b] == 0:
            sv = b_s_l[b]
            if Ws == 1:
                smask[pos[u]] &= ~(_ONE << np.uint64(sv))
            else:
                smask[pos[u], sv >> 6] &= ~(_ONE << np.uint64(sv & 63))
        u_avail_l[u] -= 1
        if u_avail_l[u] == 0:
            alive -= 1
        sv = s_l[r]
        scount_l[sv] -= 1
        if scount_l[sv] == 0:
            distinct -= 1
        tick()

    def pick(u: int, gset: set[int]) -> int:
        """The record of tuple ``u`` to add: S not in G, most unused records, lowest position."""
        best, best_n = -1, 0
        for b in range(u_b0_l[u], u_b1_l[u]):
            a = b_avail_l[b]
            if a > best_n and b_s_l[b] not in gset:
                best, best_n = b, a
        p = b_ptr_l[best]
        while used[border_l[p]]:
            p += 1
        b_ptr_l[best] = p
        return border_l[p]

    def eligible(u: int, gset: set[int]) -> bool:
        return any(b_avail_l[b] > 0 and b_s_l[b] not in gset for b in range(u_b0_l[u], u_b1_l[u]))

    def compact() -> None:
        nonlocal cur, smask
        keep = np.flatnonzero(np.asarray(u_avail_l, dtype=np.int64)[cur] > 0)
        cur = cur[keep]
        smask = smask[keep]
        pos[cur] = np.arange(cur.shape[0])
        rds.keep(cur)

    oi = 0
    while distinct >= l:
        while used[order_l[oi]]:
            oi += 1
        r = order_l[oi]
        take(r)
        members = [r]
        gset = {s_l[r]}
        g_tuple = tid_l[r]
        glo, ghi, gbits = R.lo[r].copy(), R.hi[r].copy(), R.bits[r].copy()
        size = 1
        slot = -1
        while size < l:
            stats["steps"] += 1
            G = _one(glo, ghi, gbits, size)
            if g_tuple >= 0 and eligible(g_tuple, gset):
                u = g_tuple  # DS = 0: the unique argmin, and the record wins ties with classes
                stats["shortcuts"] += 1
            else:
                if alive < len(cur) // 2 and len(cur) > COMPACT_MIN:
                    compact()
                m = len(cur)
                ds = rds(G, rbuf[:m], rtmp[:m])
                if Ws == 1:
                    notg = np.uint64(0)
                    for sv in gset:
                        notg |= _ONE << np.uint64(sv)
                    np.bitwise_and(smask, ~notg, out=andbuf[:m])
                    np.equal(andbuf[:m], 0, out=zero[:m])
                else:
                    notg_w = np.zeros(Ws, dtype=np.uint64)
                    for sv in gset:
                        notg_w[sv >> 6] |= _ONE << np.uint64(sv & 63)
                    zero[:m] = ~np.any(smask & ~notg_w, axis=1)
                np.copyto(ds, inf, where=zero[:m])
                np.round(ds, DIGITS, out=ds)  # equal up to rounding = a tie
                i = int(np.argmin(ds))
                best = ds[i]
                if not np.isfinite(best):  # cannot happen while distinct(S in D) >= l (SPEC step 2)
                    raise AssertionError("no candidate record with a new sensitive value")
                u = int(cur[i])
                if best > 0 and Q.count:
                    k, _ = Q.nearest(G, below=best)
                    if k >= 0:  # DS(t', G) <= DS(G', G) adds the record
                        other = Q.rep(k)
                        glo = np.minimum(glo, other.lo[0])
                        ghi = np.maximum(ghi, other.hi[0])
                        gbits = gbits | other.bits[0]
                        size += int(other.counts[0])
                        slot = k
                        stats["merges"] += 1
                        break
            r2 = pick(u, gset)
            take(r2)
            members.append(r2)
            gset.add(s_l[r2])
            if tid_l[r2] != g_tuple:
                g_tuple = -1
            np.minimum(glo, R.lo[r2], out=glo)
            np.maximum(ghi, R.hi[r2], out=ghi)
            np.bitwise_or(gbits, R.bits[r2], out=gbits)
            size += 1
        G = _one(glo, ghi, gbits, size)
        if slot >= 0:
            Q.set(slot, G)
        else:
            slot = Q.append(G)
        labels[members] = slot

    # step 3: every remaining record joins its nearest class, in the random order
    for r in order_l[oi:]:
        if used[r]:
            continue
        used[r] = 1
        stats["leftovers"] += 1
        t = R[r]
        dq = ds_record_class(t, Q.g, domain, work=Q.work, out=Q.out)
        dq[Q.count:] = inf
        np.round(dq, DIGITS, out=dq)
        k = int(np.argmin(dq))
        Q.add_record(k, t)
        labels[r] = k
        tick()
    if progress is not None and assigned[0] > assigned[1]:
        progress(assigned[0] - assigned[1])
    stats["classes"] = Q.count
    assert labels.min() >= 0
    return labels, stats


# -- the plugins ----------------------------------------------------------------------------------


def structured_names(name: str, typ: str) -> list[str]:
    """The structured columns published next to QI ``name`` of type ``typ``."""
    return [name + LO, name + HI] if typ in ORDERED else [name + SET]


class LClustering(Algorithm):
    name = "l-clustering"
    version = __version__
    description = ("L-clustering: distinct l-diversity by greedy clustering on hierarchy-free generalization "
                   "(intervals for ordered QIs, sets for unordered ones) with the least loss L (seed 001).")
    params = (
        Param("l", "int", min=2, help="distinct sensitive values every class must hold (distinct l-diversity)"),
        Param("weights", "dict", default=None, nullable=True,
              help="quasi-identifier -> weight >= 0 of its loss (default 1 each; seed 001 Def. 9)"),
        Param("resolution", "dict", default=None, nullable=True,
              help="continuous quasi-identifier -> its resolution unit, the '+1' of the ordered loss "
                   "(default 1 for integers, else the decimal step of the values)"),
    )

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        return {"l-diversity": {"l": params["l"]}}

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        quasi = check_quasi(table, self.name)
        s = sensitive_attribute(table, self.name)
        if s in quasi:  # a Typing cannot hold this; kept for tables built by hand
            raise InputError(f"column {s!r} cannot be both a quasi-identifier and the sensitive attribute")
        w = qi_weights(quasi, params.get("weights"), "weights")
        if not any(v > 0 for v in w.values()):
            raise InputError("parameter 'weights': at least one quasi-identifier needs a positive weight")
        qi_resolutions(table, quasi, params.get("resolution"))
        col = table.data.column(s)
        if col.null_count:
            raise InputError(f"{self.name}: sensitive column {s!r} has {col.null_count} missing value(s); the "
                             "typing step's 'missing' policy must drop them or make them a category")
        n_miss = int(missing_sensitive(table, s).sum())
        distinct = pc.count_distinct(col).as_py() - (1 if n_miss else 0)  # a missing value is not one
        if params["l"] > distinct:
            raise InputError(f"parameter 'l' = {params['l']} is larger than the number of distinct values of "
                             f"sensitive attribute {s!r} ({distinct}"
                             + (f", not counting its {n_miss} missing value(s)" if n_miss else "")
                             + f"); no class can hold {params['l']} distinct values")
        for q in quasi:
            for extra in structured_names(q, table.typing.get(q).type):
                if extra in table.columns:
                    raise InputError(f"{self.name} publishes column {extra!r} next to quasi-identifier {q!r}, but the "
                                     "input already has a column of that name; rename or drop it")

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        s_name = sensitive_attribute(table, self.name)
        space = qi_space(table, params["weights"], params["resolution"])
        s_codes = sensitive_codes(table, s_name, self.name)
        advance = ctx.progress(table.num_rows, self.name)
        miss = missing_sensitive(table, s_name)
        if miss.any():
            # a missing sensitive value is no value (docs/algorithms.md, "Missing values"): the
            # classes are built from the records with a real one; the others then join their
            # nearest record's class (never lowering its distinct values)
            real = np.flatnonzero(~miss)
            codes = np.unique(s_codes[real], return_inverse=True)[1].reshape(-1)
            labels = np.full(table.num_rows, -1, dtype=np.int64)
            labels[real], stats = l_clustering(space.values[real], space.codes[real], codes, params["l"],
                                               space.domain, ctx.rng, progress=advance)
            join_nearest(encode(table, check_quasi(table, self.name)), labels, np.flatnonzero(miss))
            advance(int(miss.sum()))
        else:
            labels, stats = l_clustering(space.values, space.codes, s_codes, params["l"], space.domain, ctx.rng,
                                         progress=advance)
        ctx.note(f"{stats['classes']} classes ({stats['merges']} merges of a formed class into a new one); "
                 f"{stats['leftovers']} record(s) joined their nearest class once fewer than l = {params['l']} "
                 "distinct sensitive values remained"
                 + (f"; {int(miss.sum())} record(s) with a missing {s_name} value joined the class of their nearest "
                    "record" if miss.any() else ""))
        return publish_generalized(table, space, labels)


def publish_generalized(table: TypedTable, space: QISpace, labels: np.ndarray) -> TypedTable:
    """Each record's QIs replaced by its class representative, published by the convention of
    :mod:`anonflow.generalization`: a readable string column per QI (``[50-52]``,
    ``{China,India}``; role and type kept), with ``<qi>_lo``/``<qi>_hi`` (continuous: float64;
    ordinal: the category strings) or ``<qi>_set`` (``list<string>``) next to it, the QI marked
    ``{"kind": "interval", "lo": ..., "hi": ..., "res": ...}`` or ``{"kind": "set", "set": ...}``,
    and ``_class``."""
    records = space.records()
    reps = Generalized.from_labels(records, labels)
    dom = space.domain
    rows = reps.rows_of(labels)
    struct = to_arrow(reps, dom, space.categories, labels=labels, suffixes=(LO, HI))
    text: dict[str, pa.Array] = {}
    for i, name in enumerate(dom.ordered_names):
        lo, hi = reps.lo[:, i], reps.hi[:, i]
        if name in space.ordinal_labels:
            cats = np.asarray([str(s) for s in space.ordinal_labels[name]])
            if np.any(lo != np.floor(lo)) or np.any(lo < 0) or np.any(hi >= len(cats)):
                raise ValueError(f"{name!r}: ordinal ranks must be integers in [0, {len(cats)})")
            lo, hi = cats[lo.astype(np.int64)], cats[hi.astype(np.int64)]
        text[name] = pa.array(interval_labels(lo, hi)[rows], type=pa.string())
    for name in dom.unordered_names:
        text[name] = set_labels(struct[name])
    for name, cats in space.ordinal_labels.items():
        table_ = pa.array(cats, type=pa.string())
        for suffix in (LO, HI):
            ranks = struct[name + suffix].to_numpy(zero_copy_only=False).astype(np.int64)
            struct[name + suffix] = table_.take(pa.array(ranks))
    res = dict(zip(dom.ordered_names, dom.res.tolist()))
    cols: list[tuple[str, pa.Array]] = []
    attrs: list[Attribute] = []
    marks: list[tuple[str, str, dict[str, Any]]] = []
    for c in table.columns:
        if c == CLASS:
            continue
        if c not in space.types:
            cols.append((c, table.data.column(c)))
            if c in table.typing:
                attrs.append(table.typing.get(c))
            continue
        typ = space.types[c]
        cols.append((c, text[c]))
        attrs.append(table.typing.get(c))
        if typ in ORDERED:
            lo, hi = structured_names(c, typ)
            marks.append((c, "interval", {"lo": lo, "hi": hi, "res": res[c]}))
            extra = [(lo, struct[c + LO]), (hi, struct[c + HI])]
        else:
            (st,) = structured_names(c, typ)
            marks.append((c, "set", {"set": st}))
            extra = [(st, struct[c])]
        for name, arr in extra:
            cols.append((name, arr))
            attrs.append(Attribute(name, "insensitive", None, options={"structured": c}))
    cols.append((CLASS, pa.array(labels, type=pa.int64())))
    data = pa.table(dict(cols))
    typing = table.typing.replace(attrs)
    for c, kind, info in marks:
        typing = mark_generalized(typing, c, kind, **info)
    return table.replace(data=data, typing=typing)


PLUGINS = [LClustering()]
