"""MAASAE: microaggregation with sensitive-attribute entropy (seed 000, SPEC section 4).

p-sensitive k-anonymity by greedy microaggregation on mixed-type quasi-identifiers
(continuous, ordinal, nominal, semantic; SPEC section 1 distances and centroids, encoded by
:mod:`anonflow_std.common`). A class G grows one record (or one formed class) at a time; each
step takes the addition with the largest anonymity protection factor APF = EA / ILA (gain of
the sensitive attribute's entropy over gain of information loss), or the smallest ILA
(``objective: min-il``, the seed's MAA-MINIL). Leftover records join the class of largest
APF({t}, {t} u G_k). Every QI is then published as its class's centroid.

The result is exactly that of Algorithm 1 evaluated literally (``tests/plugins/microaggregation/test_maasae.py``
compares with such a reference); the speed comes from evaluating every candidate and every
formed class at once, with no Python loop over records:

* **Candidate records.** IL(G + {t}) is a sum over attributes of a function of t's value on
  that attribute, so each step builds per attribute an exact table of IL_a(G + {v}) over the
  attribute's values v (G has at most k - 1 records while it is scored), adds the tables of
  several attributes into joint tables of at most JOINT_LIMIT entries, and gathers them for
  all of T (three gathers for Adult):

  - continuous: sum |x' - mean'|, mean' = (sum_G + v) / (|G| + 1), from G's sorted values and
    prefix sums (one ``searchsorted`` over the distinct values);
  - ordinal: the convex median of G + {c} for every category c (an m x m table);
  - nominal: the frequency-vector closed form |G'| / 2 (1 - sum_c f_c^2), O(1) per value;
  - semantic: the medoid of G + {v} is v (total D_G(v)) or a member u of G (total
    D_G(u) + d(u, v)); both are constant on the runs of sorted codes cut by G's prefixes,
    so they are computed on at most 2 L |G| + 1 runs and expanded with one ``repeat``. Exact.

  EA depends only on t's sensitive value; T is grouped by it, so the best record of each
  value is one ``reduceat`` (every score is monotone in ILA within a value).

* **Formed classes** (the merge G' of steps 2b/2c), pruned by exact bounds, all classes at
  once: exact EA and the exact nominal IL of G u G_k, updated as G grows (:class:`_Cross`);
  IL(G u G_k) >= OPT(G) + OPT(G_k) for the other types (the loss of each type's optimal
  centroid is superadditive; the continuous mean's loss is bounded by the L1 median's and a
  tangent); then, on the survivors, the exact ordinal IL and an ultrametric bound of the
  semantic IL; then the exact IL of the union, best bound first, only until no bound can
  reach the best exact score (:func:`_lazy_best`).

* **Leftover records** (step 3): the exact APF({t}, {t} u G_k) of every class at once over
  flat arrays of the classes' members.

Ties (scores within TIE_RTOL): the earliest record, the earliest formed class; the merge
wins a tie with the best record. Choices where SPEC leaves room: ``docs/algorithms.md``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import CLASS, Algorithm, InputError, Param, StepContext, TypedTable
from anonflow_std.common.distance import centroids
from anonflow_std.common.encode import Encoded, encode

from .. import __version__
from ..common.columns import entropy, join_nearest, missing_sensitive, sensitive_attribute, sensitive_codes
from .maasae_model import Classes, Group, Model, SemQI, abs_dev

__all__ = ["Maasae", "maasae_partition", "record_scores", "entropy", "apf", "OBJECTIVES"]

#: ILA at or below zero counts as this (SPEC section 4).
EPS = 1e-12
OBJECTIVES = ("apf", "apf-safe", "min-il")
#: largest (distinct sensitive values) x (classes) count matrix.
MAX_COUNTS = 1 << 26


# -- the formulas of SPEC section 4, on plain numbers (also used by the tests) -------------


def apf(ea: float, ila: float) -> float:
    """APF = EA / ILA with ILA <= 0 replaced by 1e-12 (Def. 14, SPEC section 4)."""
    return float(ea) / max(float(ila), EPS)


def _score(objective: str, ea: np.ndarray, ila: np.ndarray) -> np.ndarray:
    """The quantity each greedy choice maximizes.

    * ``apf``: EA / max(ILA, eps).
    * ``apf-safe``: entropy gains first (EA > 0 gives EA / ILA > 0), then, when EA <= 0,
      EA * max(ILA, eps) <= 0 -- the ratio inverted so that a larger loss is never preferred.
    * ``min-il``: -ILA.
    """
    if objective == "min-il":
        return -ila
    lim = np.maximum(ila, EPS)
    if objective == "apf":
        return ea / lim
    with np.errstate(invalid="ignore"):
        return np.where(ea > 0, ea / lim, ea * lim)


#: scores within this relative distance of the best count as ties (they differ by rounding
#: only); ties go to the earliest record / the earliest formed class.
TIE_RTOL = 1e-9


def _floor(top: float) -> float:
    """The smallest score that ties with ``top``."""
    return top - TIE_RTOL * abs(top) if np.isfinite(top) else top


def _first_best(score: np.ndarray) -> int:
    """Position of the best score; among ties (within TIE_RTOL), the first."""
    top = float(score.max())
    return int(np.argmax(score >= _floor(top)))


# -- the algorithm -----------------------------------------------------------------------


def maasae_partition(enc: Encoded, s_codes: np.ndarray, k: int, p: int, objective: str,
                     rng: np.random.Generator, progress: Callable[[int], None] | None = None,
                     stats: dict[str, int] | None = None, trace: list | None = None) -> np.ndarray:
    """Class label (0..g-1, in order of formation) of every record (SPEC section 4, Algorithm 1).

    ``s_codes`` are the sensitive values as integer codes 0..|S|-1. The caller has checked
    that ``len(s_codes) >= k``, that S has at least ``p`` distinct values and ``p <= k``.
    ``stats`` (optional) receives counters: greedy steps, merges, classes whose merge was
    evaluated exactly, leftover records.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}")
    M = Model(enc)
    n = M.n
    s_codes = np.asarray(s_codes, dtype=np.int64)
    n_s = int(s_codes.max()) + 1 if n else 0
    xlogx = np.zeros(n + 2)
    xs = np.arange(1, n + 2, dtype=np.float64)
    xlogx[1:] = xs * np.log2(xs)
    log2 = np.zeros(n + 2)
    log2[1:] = np.log2(xs)
    st = stats if stats is not None else {}
    for key in ("steps", "merges", "merge_checks", "merge_evaluations", "leftover"):
        st.setdefault(key, 0)
    Q = Classes(M, n_s, max(16, n // k + 1))
    s_small = s_codes.astype(np.int16 if n_s < (1 << 15) else np.int64)
    in_t = np.ones(n, dtype=bool)
    t_count = np.bincount(s_codes, minlength=n_s)
    done = 0

    T: _Candidates | None = None
    while in_t.sum() >= k and np.count_nonzero(t_count) >= p:
        # T grouped by sensitive value, each group in record order; compacted once per class
        if T is None:
            rows_t = np.flatnonzero(in_t)
            order = np.argsort(s_small[rows_t], kind="stable")  # radix sort on small integers
            t_idx = rows_t[order]
            T = _Candidates(t_idx, s_codes[t_idx], n_s, [c[t_idx] for c in M.joint])
        else:  # the records the last class took leave; the grouping stays
            keep = T.alive
            T = _Candidates(T.rows[keep], T.s[keep], n_s, [c[keep] for c in T.joint])
        t_idx = T.rows
        r0 = int(np.flatnonzero(in_t)[rng.integers(t_idx.shape[0])])  # a uniform draw, in record order
        T.remove(int(np.flatnonzero(t_idx == r0)[0]))
        members = [r0]
        in_t[r0] = False
        t_count[s_codes[r0]] -= 1
        X: _Cross | None = None
        while len(members) < k:
            st["steps"] += 1
            G = Group(M, np.asarray(members, dtype=np.int64))
            m = G.m
            g_cnt = np.bincount(s_codes[G.g], minlength=n_s)
            h_g = float(xlogx[g_cnt].sum())
            ent_g = float(log2[m] - h_g / m)
            # every candidate record: ILA by gathering the joint tables, EA per sensitive value
            ila = _candidate_ila(M, G, T.joint)
            ea_s = log2[m + 1] - (h_g - xlogx[g_cnt] + xlogx[g_cnt + 1]) / (m + 1) - ent_g
            if m < p:  # step 2b: only sensitive values not yet in G
                ea_s[g_cnt > 0] = -np.inf
            best, best_score = T.best(objective, ila, ea_s)
            merge = None
            if Q.count and not _no_merge_can_win(Q, objective, G, ent_g, best_score, n_s):
                if X is None:
                    X = _Cross(Q, G.g, s_codes, xlogx)
                merge = _merge_candidate(Q, objective, G, X, ent_g, best_score, log2, st)
            if trace is not None:
                trace.append(("merge", merge) if merge is not None else ("add", int(t_idx[best]), best_score))
            if merge is not None:  # merge G' into G (ties go to the merge, as in the paper)
                members.extend(Q.remove(merge).tolist())
                st["merges"] += 1
            else:
                if best < 0:
                    raise AssertionError("no candidate record and no class to merge")
                r = int(t_idx[best])
                members.append(r)
                in_t[r] = False
                t_count[s_codes[r]] -= 1
                T.remove(best)
                if X is not None:
                    X.add(Q, r, int(s_codes[r]), int(g_cnt[s_codes[r]]), xlogx)
        Q.add(np.sort(np.asarray(members, dtype=np.int64)), s_codes, xlogx)
        if progress is not None:
            assigned = n - int(in_t.sum())
            progress(assigned - done)
            done = assigned

    rest = np.flatnonzero(in_t)
    st["leftover"] = int(rest.shape[0])
    if rest.shape[0]:
        _join_leftovers(Q, rng.permutation(rest), objective, s_codes, xlogx, progress)
    labels = np.full(n, -1, dtype=np.int64)
    for j in range(Q.count):
        labels[Q.members[j]] = j
    assert (labels >= 0).all()
    return labels


def _ub(objective: str, ea: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """Upper bound of the score for an exact EA (or an upper bound of it) and ILA >= lb."""
    if objective == "min-il":
        return -lb
    lim = np.maximum(lb, EPS)
    with np.errstate(invalid="ignore"):
        return np.where(ea > 0, ea / lim, 0.0 if objective == "apf" else ea * lim)


def _candidate_ila(M: Model, G: Group, joint: list[np.ndarray]) -> np.ndarray:
    """ILA(G, G + {t}) = IL(G + {t}) - IL(G) for the records with joint codes ``joint``: the
    per-attribute tables summed into joint tables, then one gather per joint table."""
    ila = None
    for grp, codes in zip(M.groups, joint):
        t = G.tabs[grp[0]]
        for i in grp[1:]:
            t = np.add.outer(t, G.tabs[i]).ravel()
        if ila is None:
            ila = (t - G.il)[codes]
        else:
            ila += t[codes]
    assert ila is not None
    return ila


def record_scores(enc: Encoded, s_codes: np.ndarray, members: np.ndarray,
                  objective: str = "apf") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ILA(G, G + {t}), EA(G, G + {t}) and the objective's score for every record t of
    ``enc``, where G is the group of records ``members``, computed exactly as a greedy step
    computes them (for records of G itself the numbers are those of a copy of it)."""
    M = Model(enc)
    s_codes = np.asarray(s_codes, dtype=np.int64)
    G = Group(M, np.asarray(members, dtype=np.int64))
    ila = _candidate_ila(M, G, M.joint)
    cnt = np.bincount(s_codes[G.g], minlength=int(s_codes.max()) + 1).astype(np.float64)
    ent_g = entropy(cnt)
    plus = cnt[None, :] + np.eye(cnt.shape[0])
    ea_s = np.array([entropy(row) for row in plus]) - ent_g
    ea = ea_s[s_codes]
    return ila, ea, _score(objective, ea, ila)


class _Candidates:
    """The records of T while one class is built: grouped by sensitive value (each group in
    record order), with the joint codes of each record; removed records are marked dead."""

    def __init__(self, rows: np.ndarray, s: np.ndarray, n_s: int, joint: list[np.ndarray]) -> None:
        self.rows = rows
        self.joint = joint
        self.starts = np.searchsorted(s, np.arange(n_s + 1))
        self.left = np.diff(self.starts)  # live records per sensitive value
        self.alive = np.ones(rows.shape[0], dtype=bool)
        self.dead: list[int] = []
        self.s = s
        self.nonempty = np.flatnonzero(self.left > 0)
        self.nonempty_starts = self.starts[self.nonempty]

    def remove(self, pos: int) -> None:
        self.alive[pos] = False
        self.dead.append(pos)
        self.left[self.s[pos]] -= 1

    def best(self, objective: str, ila: np.ndarray, ea_s: np.ndarray) -> tuple[int, float]:
        """Position and score of the best live candidate: the largest score, ties (within
        TIE_RTOL) to the earliest record; when the best score is exactly 0 (no entropy
        change), the least ILA among those scoring 0, then the earliest record.

        Every score is monotone in ILA within a sensitive value (EA is fixed there): so each
        value's best is its least ILA (or, for ``apf`` with EA < 0, its largest), one
        ``reduceat`` over T, and only the winning values' records are scored one by one."""
        if self.dead:
            ila[self.dead] = np.inf
        allowed = (self.left > 0) & (ea_s > -np.inf)
        vals = np.flatnonzero(allowed)
        if vals.size == 0:
            return -1, -np.inf
        nonempty = self.nonempty
        lo = np.full(ea_s.shape[0], np.inf)
        lo[nonempty] = np.minimum.reduceat(ila, self.nonempty_starts)
        ea = ea_s[vals]
        top_s = _score(objective, ea, lo[vals])
        if objective == "apf" and (ea < 0).any() and not (ea >= 0).any():
            live = np.where(self.alive, ila, -np.inf)
            hi = np.full(ea_s.shape[0], -np.inf)
            hi[nonempty] = np.maximum.reduceat(live, self.nonempty_starts)
            top_s = np.where(ea < 0, _score(objective, ea, hi[vals]), top_s)
        top = float(top_s.max())
        if top == 0.0 and objective != "min-il":  # no entropy change: least ILA, then earliest
            zero = vals[ea == 0.0]
            least = float(lo[zero].min())
            limit = -_floor(-least)
            picks = []
            for v in zero:
                a, b = self.starts[v], self.starts[v + 1]
                ok = np.flatnonzero((ila[a:b] <= limit) & self.alive[a:b])
                if ok.size:
                    picks.append(a + int(ok[0]))
            pos = min(picks, key=lambda i: self.rows[i])
            return pos, 0.0
        floor = _floor(top)
        picks = []
        for v in vals[top_s >= floor]:
            a, b = self.starts[v], self.starts[v + 1]
            sc = _score(objective, np.full(b - a, ea_s[v]), ila[a:b])
            ok = np.flatnonzero((sc >= floor) & self.alive[a:b])
            if ok.size:
                picks.append((a + int(ok[0]), float(sc[ok[0]])))
        pos, score = min(picks, key=lambda x: self.rows[x[0]])
        return pos, score


class _Cross:
    """What G shares with every formed class, updated as G grows one record at a time (Q
    does not change while G is built, except by a merge, which completes G): the change of
    sum_s c_s log2 c_s when G is added to the class (exact EA), and sum over nominal
    attributes of sum_c n_G(c) n_k(c) (the exact nominal IL of the union). Built on the
    first step that needs it."""

    def __init__(self, Q: "Classes", g: np.ndarray, s_codes: np.ndarray, xlogx: np.ndarray) -> None:
        nq = Q.count
        g_cnt = np.bincount(s_codes[g], minlength=Q.n_s)
        supp = np.flatnonzero(g_cnt)
        rows = Q.scount[supp, :nq]
        self.dh = (xlogx[rows + g_cnt[supp, None]] - xlogx[rows]).sum(axis=0)
        self.cross = Q.nomcnt[Q.M.nom_codes[g].ravel(), :nq].sum(axis=0) if Q.M.nom else np.zeros(nq)

    def add(self, Q: "Classes", r: int, s: int, before: int, xlogx: np.ndarray) -> None:
        nq = Q.count
        if nq == 0:
            return
        c = Q.scount[s, :nq]
        self.dh += xlogx[c + before + 1] - xlogx[c + before]
        if Q.M.nom:
            self.cross += Q.nomcnt[Q.M.nom_codes[r], :nq].sum(axis=0)


def _no_merge_can_win(Q: Classes, objective: str, G: Group, ent_g: float, best_score: float, n_s: int) -> bool:
    """A bound over all classes at once: ILA(G, G u G_k) >= min_k OPT(G_k) + OPT(G) - IL(G)
    and EA(G, G u G_k) <= log2(min(|G| + max_k |G_k|, |S|)) - Ent(G)."""
    threshold = _floor(best_score)
    least_opt, largest = Q.summary()
    lb = least_opt + (G.opt - G.il)
    if objective == "min-il":
        return lb > -threshold
    if threshold <= 0:
        return False
    ea = np.log2(min(largest + G.m, n_s)) - ent_g
    return bool(ea < threshold * max(lb, EPS))


def _merge_candidate(Q: Classes, objective: str, G: Group, X: _Cross, ent_g: float, best_score: float,
                     log2: np.ndarray, st: dict[str, int]) -> int | None:
    """The formed class G' to merge into G instead of adding the best record (score
    ``best_score``; the merge wins ties), or None.

    Level 0, every class: exact EA and exact nominal IL of G u G_k (from ``X``), and
    IL >= OPT(G) + OPT(G_k) for the other attributes (the loss of each type's optimal
    centroid is superadditive). Level 0b, the classes kept: for each continuous attribute,
    the exact loss of G's records around the union's mean plus a tangent / L1-median / mean
    bound for G_k's records. Then, lazily and best bound first (:func:`_lazy_best`): the
    exact ordinal IL and the ultrametric bound of the semantic IL (:func:`_sem_union_bound`),
    and the exact IL of the union (:func:`_union_rest`)."""
    nq = Q.count
    M = Q.M
    threshold = _floor(best_score)  # the merge wins ties
    itot = Q.size[:nq] + G.m
    ea = log2[itot] - (Q.h[:nq] + X.dh) / itot - ent_g
    # lb0 = exact nominal IL of the union + OPT of the rest of G_k and of G - IL(G)
    lb0 = Q.optnn[:nq] + (G.opt - G.nom_il - G.il)
    if M.nom:
        lb0 += 0.5 * len(M.nom) * itot - 0.5 * (Q.q2[:nq] + 2.0 * X.cross + G.nom_q2) / itot
    if objective == "min-il":
        cand = np.flatnonzero(lb0 <= -threshold)
    elif threshold > 0:  # only EA > 0 can reach it: EA >= threshold * max(lb, eps)
        np.maximum(lb0, EPS, out=lb0)
        lb0 *= threshold
        cand = np.flatnonzero(ea >= lb0)
    else:
        cand = np.flatnonzero(_ub(objective, ea, lb0) >= threshold)
    if cand.size == 0:
        return None
    ea, size = ea[cand], Q.size[cand]
    tot = (size + G.m).astype(np.float64)
    il_nom = np.zeros(cand.shape[0])
    if M.nom:
        il_nom = 0.5 * len(M.nom) * tot - 0.5 * (Q.q2[cand] + 2.0 * X.cross[cand] + G.nom_q2) / tot
    lb = il_nom - G.il
    cont_mu = []
    for a, (gs, cs) in enumerate(G.cont):
        mu = (Q.csum[a, cand] + cs[-1]) / tot
        cont_mu.append(mu)
        own = np.maximum(np.maximum(Q.cil[a, cand] + Q.cslope[a, cand] * (mu - Q.cmean[a, cand]), Q.copt[a, cand]),
                         np.abs(Q.csum[a, cand] - size * mu))
        lb += own + abs_dev(gs, cs, mu)
    rest = Q.oopt[cand] + Q.sopt[cand] + (G.ord_opt + G.sem_opt)
    ub0 = _ub(objective, ea, lb + rest)
    keep = ub0 >= threshold
    if not keep.any():
        return None
    st["merge_checks"] += 1
    cand, ub0, ea, il_nom, lb = cand[keep], ub0[keep], ea[keep], il_nom[keep], lb[keep]
    cont_mu = [mu[keep] for mu in cont_mu]

    def refine(pos: np.ndarray) -> np.ndarray:
        slots = cand[pos]
        lb1 = lb[pos].copy()
        for a, (_, h) in enumerate(M.ord):
            lb1 += h.il_counts(getattr(Q, f"ordcnt{a}")[:, slots] + G.ord[a][:, None])
        for a, (_, h) in enumerate(M.sem):
            lb1 += _sem_union_bound(Q, a, h, slots, G.sem[a])
        return _ub(objective, ea[pos], lb1)

    def exact(pos: np.ndarray) -> np.ndarray:
        slots = cand[pos]
        st["merge_evaluations"] += int(slots.shape[0])
        il = il_nom[pos] + _union_rest(Q, slots, G, [mu[pos] for mu in cont_mu])
        return _score(objective, ea[pos], il - G.il)

    best = _lazy_best(ub0, threshold, refine, exact)
    return None if best is None else int(cand[best])


def _sem_union_bound(Q: Classes, a: int, h: SemQI, cand: np.ndarray, g_sem: tuple[np.ndarray, ...]) -> np.ndarray:
    """Lower bound of the semantic IL of G u G_k for the classes ``cand``, from G's codes and
    each class's medoid m_k and per-level member summaries.

    The CHT distance is an ultrametric: with p = lcp(x, m_k) and q = lcp(y, m_k), p != q
    implies lcp(x, y) = min(p, q). So d(g, c) for g in G and c in G_k is known exactly unless
    p == q (then >= 0), which bounds both ways the medoid of the union can fall: in G_k
    (member total + total to G) or in G (total to G + total to G_k)."""
    u, cu, d_g = g_sem
    nc = cand.shape[0]
    med = getattr(Q, f"smed{a}")[cand]
    p = (h.lo[:, u][:, :, None] == h.lo[:, med][:, None, :]).sum(axis=0)  # (|u|, classes): lcp(u, m_k)
    levels = h.lo.shape[0] + 1
    col = np.arange(nc)
    # G's members by their lcp with m_k; a member c of G_k with lcp(c, m_k) = q is at
    # distance dist[p] from a g with p < q, dist[q] from one with p > q, >= 0 if p == q
    hist = np.bincount((p * nc + col[None, :]).ravel(), weights=np.repeat(cu, nc), minlength=levels * nc)
    hist = hist.reshape(levels, nc)
    below = np.cumsum(hist * h.dist[:, None], axis=0) - hist * h.dist[:, None]
    above = hist.sum(axis=0)[None, :] - np.cumsum(hist, axis=0)
    to_g = below + h.dist[:, None] * above  # (levels, classes)
    il_g = float(d_g.min())  # no code has a smaller total to G (nor to G_k than its medoid)
    via_class = (getattr(Q, f"smin{a}")[:, cand] + np.maximum(to_g, il_g)).min(axis=0)
    gt = getattr(Q, f"sgt{a}")[:, cand][p, col[None, :]]
    lt = getattr(Q, f"slt{a}")[:, cand][p, col[None, :]]
    via_g = (d_g[:, None] + np.maximum(h.dist[p] * gt + lt, getattr(Q, f"sil{a}")[cand][None, :])).min(axis=0)
    return np.maximum(np.minimum(via_class, via_g), getattr(Q, f"sil{a}")[cand] + il_g)


def _union_rest(Q: Classes, slots: np.ndarray, G: Group, cont_mu: list[np.ndarray]) -> np.ndarray:
    """Exact IL(G u G_k) over the continuous, ordinal and semantic attributes, for the
    classes ``slots`` (continuous means given)."""
    M = Q.M
    parts = [Q.members[j] for j in slots]
    sizes = np.array([x.shape[0] for x in parts], dtype=np.int64)
    idx = np.concatenate(parts)
    lab = np.repeat(np.arange(slots.shape[0]), sizes)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    il = np.zeros(slots.shape[0])
    for a, (_, h) in enumerate(M.cont):
        gs, cs = G.cont[a]
        mu = cont_mu[a]
        il += np.add.reduceat(np.abs(h.x[idx] - mu[lab]), starts) + abs_dev(gs, cs, mu)
    for a, (_, h) in enumerate(M.ord):
        il += h.il_counts(getattr(Q, f"ordcnt{a}")[:, slots] + G.ord[a][:, None])
    for a, (_, h) in enumerate(M.sem):
        u, _, d_g = G.sem[a]
        cs_g = np.sort(h.code[G.g])
        codes = h.code[idx]
        # medoid in G_k: its total to G_k (kept per member) + its total to G
        own = np.concatenate([Q.memtot[a][j] for j in slots])
        via_class = np.minimum.reduceat(own + h.totals(cs_g, codes), starts)
        # medoid in G: D_G(u) + its total to G_k, counted per class on (class, code) keys
        keys = np.sort(lab * h.size + codes)
        base = (np.arange(slots.shape[0]) * h.size)[None, :, None]
        n_p = (np.searchsorted(keys, base + h.hi[:, u][:, None, :])
               - np.searchsorted(keys, base + h.lo[:, u][:, None, :]))  # (L, classes, |u|)
        to_class = h.d0 * sizes[:, None] + np.einsum("p,pku->ku", h.delta, n_p)
        via_g = (d_g[None, :] + to_class).min(axis=1)
        il += np.minimum(via_class, via_g)
    return il


def _lazy_best(ub0: np.ndarray, threshold: float, refine: Callable[[np.ndarray], np.ndarray],
               evaluate: Callable[[np.ndarray], np.ndarray]) -> int | None:
    """Position of the best exact score >= ``threshold`` (ties within TIE_RTOL: the lowest
    position), given an upper bound ``ub0`` of every score, a tighter one computed by
    ``refine(positions)`` and the exact one by ``evaluate(positions)``.

    Best first: refine the unrefined candidates of largest ``ub0`` while that bound beats
    every refined bound, else evaluate the refined candidates of largest refined bound;
    stop when no bound left can reach the best exact score (or the threshold)."""
    n = ub0.shape[0]
    order = np.lexsort((np.arange(n), -ub0))
    ub1 = np.full(n, -np.inf)  # refined bound of refined, not yet evaluated candidates
    seen: list[np.ndarray] = []
    scores: list[np.ndarray] = []
    top = -np.inf
    at, ref_batch, ex_batch = 0, 32, 4
    while True:
        floor = max(threshold, _floor(top))
        next0 = ub0[order[at]] if at < n else -np.inf
        top1 = ub1.max() if n else -np.inf
        if max(next0, top1) < floor:
            break
        if next0 > top1:
            pos = order[at: at + ref_batch]
            at += pos.shape[0]
            ub1[pos] = refine(pos)
            ref_batch *= 2
            continue
        live = np.flatnonzero(ub1 >= floor)
        pos = live[np.lexsort((live, -ub1[live]))][:ex_batch]
        sc = evaluate(pos)
        ub1[pos] = -np.inf
        seen.append(pos)
        scores.append(sc)
        top = max(top, float(sc.max()))
        ex_batch *= 2
    if not seen or top < threshold:
        return None
    pos, sc = np.concatenate(seen), np.concatenate(scores)
    return int(pos[sc >= _floor(top)].min())


def _join_leftovers(Q: Classes, order: np.ndarray, objective: str, s_codes: np.ndarray, xlogx: np.ndarray,
                    progress: Callable[[int], None] | None) -> None:
    """Step 3: each leftover record (in ``order``) joins the class with the largest
    APF({t}, {t} u G_k) = Ent(G_k + t) / IL(G_k + t) (or the smallest IL for min-il),
    computed exactly for every class at once over flat arrays of the classes' members."""
    M = Q.M
    nq = Q.count
    sizes = Q.size[:nq].copy()
    flat = np.concatenate(Q.members[:nq])  # members of class 0, then class 1, ...
    cls = np.repeat(np.arange(nq), sizes)
    f_x = [h.x[flat] for _, h in M.cont]
    f_code = [h.code[flat] for _, h in M.sem]
    f_tot = [np.concatenate(lst[:nq]) for lst in Q.memtot]
    for r in order:
        r = int(r)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        n1 = (sizes + 1).astype(np.float64)
        c_s = Q.scount[int(s_codes[r]), :nq]
        ent = np.log2(n1) - (Q.h[:nq] - xlogx[c_s] + xlogx[c_s + 1]) / n1
        il = np.zeros(nq)
        if M.nom:
            cross = Q.nomcnt[M.nom_codes[r]][:, :nq].sum(axis=0)
            il += 0.5 * len(M.nom) * n1 - 0.5 * (Q.q2[:nq] + 2.0 * cross + len(M.nom)) / n1
        for a, (_, h) in enumerate(M.cont):
            mu = (Q.csum[a, :nq] + h.x[r]) / n1
            il += np.add.reduceat(np.abs(f_x[a] - mu[cls]), starts) + np.abs(h.x[r] - mu)
        for a, (_, h) in enumerate(M.ord):
            cnt = getattr(Q, f"ordcnt{a}")[:, :nq].copy()
            cnt[h.code[r]] += 1.0
            il += h.il_counts(cnt)
        for a, (_, h) in enumerate(M.sem):
            dc = h.cht.distance_to(int(h.code[r]))[f_code[a]]
            via_member = np.minimum.reduceat(f_tot[a] + dc, starts)  # a member of G_k is the medoid
            as_itself = np.add.reduceat(dc, starts)  # t is the medoid
            il += np.minimum(via_member, as_itself)
        score = -il if objective == "min-il" else ent / np.maximum(il, EPS)
        j = _first_best(score)
        at = int(starts[j] + sizes[j])
        flat = np.insert(flat, at, r)
        cls = np.insert(cls, at, j)
        sizes[j] += 1
        f_x = [np.insert(x, at, h.x[r]) for x, (_, h) in zip(f_x, M.cont)]
        f_code = [np.insert(c, at, h.code[r]) for c, (_, h) in zip(f_code, M.sem)]
        lo = int(starts[j])
        Q.set(j, np.sort(flat[lo: at + 1]), s_codes, xlogx)
        for a, (_, h) in enumerate(M.sem):
            codes = f_code[a][lo: at + 1]
            f_tot[a] = np.concatenate([f_tot[a][:lo], h.totals(np.sort(codes), codes), f_tot[a][at:]])
        if progress is not None:
            progress(1)


# -- the plugin ------------------------------------------------------------------------------


class Maasae(Algorithm):
    name = "maasae"
    version = __version__
    description = ("MAASAE: p-sensitive k-anonymity by microaggregation maximizing entropy gain / information-loss "
                   "gain on mixed-type QIs (seed 000).")
    params = (
        Param("k", "int", min=2, help="minimum class size"),
        Param("p", "int", min=2, help="minimum number of distinct sensitive values per class (1 < p <= k)"),
        Param("objective", "str", default="apf", choices=OBJECTIVES,
              help="apf: max EA/ILA (the paper); apf-safe: entropy gains first, never reward a larger loss; "
                   "min-il: min ILA (MAA-MINIL baseline)"),
    )

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        return {"k-anonymity": {"k": params["k"]},
                "p-sensitive-k-anonymity": {"k": params["k"], "p": params["p"]}}

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        k, p = params["k"], params["p"]
        if p > k:
            raise InputError(f"parameter 'p' = {p} is larger than 'k' = {k}; p-sensitive k-anonymity needs "
                             "1 < p <= k")
        quasi = table.typing.quasi
        if not quasi:
            raise InputError("maasae needs at least one quasi-identifier; name them under 'quasi' in the typing step")
        s = sensitive_attribute(table, self.name)
        if s in quasi:  # a Typing cannot hold this; kept for tables built by hand
            raise InputError(f"column {s!r} cannot be both a quasi-identifier and the sensitive attribute")
        for name in quasi:
            attr = table.typing.get(name)
            if attr.type not in ("continuous", "ordinal", "nominal", "semantic"):
                raise InputError(f"quasi-identifier {name!r} has no type; declare it continuous, ordinal, nominal "
                                 "or semantic in the typing step")
        if k > table.num_rows:
            raise InputError(f"parameter 'k' = {k} is larger than the table ({table.num_rows} records)")
        col = table.data.column(s)
        if col.null_count:
            raise InputError(f"sensitive column {s!r} has {col.null_count} missing value(s); the typing step's "
                             "'missing' policy must drop them or make them a category")
        miss = missing_sensitive(table, s)
        n_miss = int(miss.sum())
        distinct = len(pc.unique(col)) - (1 if n_miss else 0)  # a missing value is not a distinct value
        if distinct < p:
            raise InputError(f"parameter 'p' = {p} needs at least {p} distinct values of the sensitive attribute "
                             f"{s!r}, which has {distinct}" + (f" (and {n_miss} missing value(s))" if n_miss else ""))
        if n_miss and table.num_rows - n_miss < k:
            raise InputError(f"parameter 'k' = {k} is larger than the records with a real value of {s!r} "
                             f"({table.num_rows - n_miss}; {n_miss} are missing)")
        if distinct * (table.num_rows // k + 1) > MAX_COUNTS:
            raise InputError(f"maasae keeps a count per class and sensitive value: {distinct} distinct values of "
                             f"{s!r} in up to {table.num_rows // k + 1} classes is too many; is {s!r} really a "
                             "categorical sensitive attribute?")

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        self.check(params, table=table)
        s = sensitive_attribute(table, self.name)
        s_codes = sensitive_codes(table, s, self.name)
        enc = encode(table)
        advance = ctx.progress(table.num_rows, "maasae")
        stats: dict[str, int] = {}
        miss = missing_sensitive(table, s)
        if miss.any():
            # a missing sensitive value is no value (docs/algorithms.md, "Missing values"): the
            # classes are built from the records with a real one; the others then join their
            # nearest record's class (never lowering its distinct values)
            real = np.flatnonzero(~miss)
            codes = np.unique(s_codes[real], return_inverse=True)[1].reshape(-1)
            labels = np.full(table.num_rows, -1, dtype=np.int64)
            labels[real] = maasae_partition(enc.take(real), codes, params["k"], params["p"], params["objective"],
                                            ctx.rng, progress=advance, stats=stats)
            join_nearest(enc, labels, np.flatnonzero(miss))
            advance(int(miss.sum()))
        else:
            labels = maasae_partition(enc, s_codes, params["k"], params["p"], params["objective"], ctx.rng,
                                      progress=advance, stats=stats)
        g = int(labels.max()) + 1
        ctx.note(f"{g} classes; {stats['merges']} merge(s) of formed classes; {stats['leftover']} leftover "
                 f"record(s) joined existing classes"
                 + (f"; {int(miss.sum())} record(s) with a missing {s} value joined the class of their nearest "
                    "record" if miss.any() else ""))
        return publish_centroids(table, enc, labels, g)


def publish_centroids(table: TypedTable, enc: Encoded, labels: np.ndarray, g: int) -> TypedTable:
    """Replace each quasi-identifier by its class centroid's published value (SPEC section 1:
    mean in original units, median category, mode, medoid code) and add ``_class``."""
    cents = centroids(enc, labels, g)
    published = cents.published()
    take = pa.array(labels)
    data = table.data
    for name, values in published.items():
        col = values.take(take)
        original = data.schema.field(name).type
        if col.type != original and not pa.types.is_floating(col.type):
            try:
                col = col.cast(original)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        data = data.set_column(data.column_names.index(name), name, col)
    return table.replace(data=data.append_column(CLASS, pa.array(labels, type=pa.int64())))


PLUGINS = [Maasae()]
