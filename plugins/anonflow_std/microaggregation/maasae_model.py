"""MAASAE's working state (SPEC section 4): the encoded quasi-identifiers prepared for the
greedy steps -- continuous (:class:`ContQI`), ordinal (:class:`OrdQI`) and semantic
(:class:`SemQI`) parts, the joint tables of attributes scored together (:class:`Model`), the
class being grown (:class:`Group`) -- and the classes formed so far (:class:`Classes`), as
:func:`~anonflow_std.microaggregation.maasae.maasae_partition` uses them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anonflow_std.common.encode import Continuous, Encoded, Nominal, Ordinal, Semantic

#: largest joint table (product of the cardinalities of attributes scored together).
JOINT_LIMIT = 1 << 13


class ContQI:
    """Continuous attribute: IL = sum |x' - mean| on min-max scaled values; OPT = sum |x' - median|."""

    def __init__(self, attr: Continuous) -> None:
        self.x = attr.scaled
        self.values, inverse = np.unique(self.x, return_inverse=True)
        self.code = inverse.astype(np.int64).ravel()
        self.size = int(self.values.shape[0])

    def stats(self, members: np.ndarray) -> tuple[float, float, float, float, float]:
        """sum, mean, IL, a subgradient of mu -> sum |x - mu| at the mean, OPT."""
        g = self.x[members]
        s = float(g.sum())
        mean = s / g.shape[0]
        slope = float(np.count_nonzero(g < mean) - np.count_nonzero(g > mean))
        return s, mean, float(np.abs(g - mean).sum()), slope, float(np.abs(g - np.median(g)).sum())


def abs_dev(g: np.ndarray, cs: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """sum_i |g_i - mu| for every mu, given sorted g and its prefix sums cs (cs[0] = 0)."""
    pos = np.searchsorted(g, mu)
    return mu * (2 * pos - g.shape[0]) + cs[-1] - 2.0 * cs[pos]


class OrdQI:
    """Ordinal attribute: IL = sum |pos - pos(convex median)| (which is also OPT)."""

    def __init__(self, attr: Ordinal) -> None:
        self.code = attr.codes.astype(np.int64)
        self.pos = attr.pos
        self.size = int(attr.pos.shape[0])
        self._ar = np.arange(self.size)

    def il_counts(self, cnt: np.ndarray) -> np.ndarray:
        """IL of classes given as count columns ``cnt`` (size x classes)."""
        tot = cnt.sum(axis=0)
        med = np.argmax(2 * np.cumsum(cnt, axis=0) >= tot[None, :], axis=0)
        return (cnt * np.abs(self.pos[:, None] - self.pos[med][None, :])).sum(axis=0)

    def table(self, cnt: np.ndarray, m: int) -> np.ndarray:
        """IL(G + {c}) for every category c."""
        cum = np.cumsum(cnt)[None, :] + (self._ar[None, :] >= self._ar[:, None])
        med = np.argmax(2 * cum >= m + 1, axis=1)
        d = np.abs(self.pos[None, :] - self.pos[med][:, None])
        return d @ cnt + d[self._ar, self._ar]


class SemQI:
    """Semantic attribute: IL = total CHT distance to the medoid, a member value (also OPT:
    no code of the tree has a smaller total, since a code off every member's path shares
    less with all of them than the member it branched from)."""

    def __init__(self, attr: Semantic) -> None:
        assert attr.cht is not None
        self.cht = attr.cht
        self.code = attr.codes.astype(np.int64)
        m, length = attr.cht.m, attr.cht.length
        self.size = m
        dist = attr.cht.distance_by_lcp
        self.d0 = float(dist[0])
        self.delta = np.diff(dist)  # dist[p] - dist[p-1], p = 1..L (<= 0)
        self.dist = dist
        # lo[p, c] .. hi[p, c]: the run of sorted codes that share their first p symbols with
        # code c; lo[p] also names the level-p prefix, so lcp(a, b) = #{p >= 1: lo[p,a] == lo[p,b]}
        adj = np.full(m, -1, dtype=np.int64)
        if m > 1:
            adj[1:] = attr.cht.lcp(np.arange(m - 1), np.arange(1, m))
        lo = np.empty((length + 1, m), dtype=np.int64)
        hi = np.empty((length + 1, m), dtype=np.int64)
        for p in range(length + 1):
            start = adj < p
            starts = np.flatnonzero(start)
            run = np.cumsum(start) - 1
            lo[p] = starts[run]
            hi[p] = np.append(starts[1:], m)[run]
        self.lo, self.hi = lo[1:], hi[1:]
        self._ar = np.arange(64)

    def _row_offsets(self, nu: int, nseg: int) -> np.ndarray:
        return self._ar[:nu] * (nseg + 1) if nu <= self._ar.shape[0] else np.arange(nu) * (nseg + 1)

    def totals(self, group_sorted: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Total CHT distance of each ``query`` code to a group (its codes sorted, repeats
        kept): d0 * |group| + sum_p (dist[p] - dist[p-1]) * #(members sharing p symbols),
        the counts read off the sorted codes by ``searchsorted``."""
        n_p = np.searchsorted(group_sorted, self.hi[:, query]) - np.searchsorted(group_sorted, self.lo[:, query])
        return self.d0 * group_sorted.shape[0] + self.delta @ n_p

    def group(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For a small group's codes: its distinct codes u, their counts, D_G(u) (total
        distance of u to the group) and IL(G + {v}) for every code v.

        The medoid of G + {v} is v (total D_G(v)) or a member u (total D_G(u) + d(u, v)).
        Both are constant on the runs of sorted codes cut by the prefixes of G's codes, so
        they are computed per run: run j lies inside u's level-p prefix exactly when its
        position is between those of lo[p, u] and hi[p, u], so lcp(u, run j) counts those
        levels (a difference array and a cumulative sum)."""
        cs_ = np.sort(codes)
        first = np.empty(cs_.shape[0], dtype=bool)
        first[0] = True
        np.not_equal(cs_[1:], cs_[:-1], out=first[1:])
        at = np.flatnonzero(first)
        u = cs_[at]
        nu = u.shape[0]
        cu = np.empty(nu)
        cu[:-1] = at[1:] - at[:-1]
        cu[-1] = cs_.shape[0] - at[-1]
        length = self.lo.shape[0]
        half = length * nu
        keys = np.empty(2 * half + 2, dtype=np.int64)
        keys[:half] = self.lo[:, u].ravel()
        keys[half: 2 * half] = self.hi[:, u].ravel()
        keys[2 * half:] = (0, self.size)
        order = keys.argsort(kind="stable")
        sk = keys[order]
        new = np.empty(sk.shape[0], dtype=bool)
        new[0] = True
        np.not_equal(sk[1:], sk[:-1], out=new[1:])
        bounds = sk[new]
        nseg = bounds.shape[0] - 1
        inv = np.empty(sk.shape[0], dtype=np.int64)
        inv[order] = np.cumsum(new) - 1
        inv = inv[: 2 * half].reshape(2, length, nu) + self._row_offsets(nu, nseg)
        marks = (np.bincount(inv[0].ravel(), minlength=nu * (nseg + 1))
                 - np.bincount(inv[1].ravel(), minlength=nu * (nseg + 1)))
        lcp = np.cumsum(marks.reshape(nu, nseg + 1), axis=1)[:, :nseg]
        d = self.dist[lcp]  # (|u|, runs)
        as_itself = cu @ d
        d_g = as_itself[inv[0, length - 1] - self._row_offsets(nu, nseg)]  # u's own run at level L is u itself
        via_member = (d_g[:, None] + d).min(axis=0)
        return u, cu, d_g, np.repeat(np.minimum(as_itself, via_member), bounds[1:] - bounds[:-1])


class Model:
    """The quasi-identifiers of all records, prepared once: nominal attributes as one block
    of offset codes (so one ``bincount`` counts them all), the others one helper each."""

    def __init__(self, enc: Encoded) -> None:
        self.n = enc.n
        self.cont: list[tuple[int, ContQI]] = []
        self.ord: list[tuple[int, OrdQI]] = []
        self.sem: list[tuple[int, SemQI]] = []
        nom: list[tuple[int, Nominal]] = []
        self.sizes: list[int] = []
        self.codes: list[np.ndarray] = []
        for i, a in enumerate(enc.attributes):
            if isinstance(a, Continuous):
                h: Any = ContQI(a)
                self.cont.append((i, h))
            elif isinstance(a, Ordinal):
                h = OrdQI(a)
                self.ord.append((i, h))
            elif isinstance(a, Nominal):
                h = None
                nom.append((i, a))
            else:
                h = SemQI(a)
                self.sem.append((i, h))
            self.sizes.append(h.size if h is not None else a.m)
            self.codes.append(h.code if h is not None else a.codes.astype(np.int64))
        self.nom = [i for i, _ in nom]
        widths = [a.m for _, a in nom]
        self.nom_off = np.concatenate(([0], np.cumsum(widths))).astype(np.int64)
        self.W = int(self.nom_off[-1])
        self.nom_of = np.repeat(np.arange(len(nom)), widths)
        self.nom_codes = (np.stack([self.codes[i] for i in self.nom], axis=1) + self.nom_off[:-1][None, :]
                          if nom else np.zeros((self.n, 0), dtype=np.int64))
        self.groups = joint_groups(self.sizes)
        self.joint = []
        for grp in self.groups:
            code = np.zeros(self.n, dtype=np.int64)
            for i in grp:
                code = code * self.sizes[i] + self.codes[i]
            self.joint.append(code)


def joint_groups(sizes: list[int], limit: int = JOINT_LIMIT) -> list[list[int]]:
    """Attributes scored together: ascending cardinality, product of cardinalities <= ``limit``."""
    groups: list[list[int]] = []
    current: list[int] = []
    prod = 1
    for i in sorted(range(len(sizes)), key=lambda i: (sizes[i], i)):
        if current and prod * sizes[i] > limit:
            groups.append(current)
            current, prod = [], 1
        current.append(i)
        prod *= sizes[i]
    if current:
        groups.append(current)
    return groups


class Group:
    """The class G under construction (at most k - 1 records while it is scored)."""

    def __init__(self, M: Model, g: np.ndarray) -> None:
        m = g.shape[0]
        self.g, self.m = g, m
        il = opt = 0.0
        tabs: list[Any] = [None] * len(M.sizes)
        # nominal block: counts, sum of squared counts, IL = sum_a m/2 (1 - sum_c f_c^2)
        self.nom_cnt = np.bincount(M.nom_codes[g].ravel(), minlength=M.W).astype(np.float64)
        self.nom_q2 = float(self.nom_cnt @ self.nom_cnt)
        il_nom = self.nom_il = 0.5 * m * len(M.nom) - 0.5 * self.nom_q2 / m
        il += il_nom
        opt += il_nom
        if M.nom:
            q2a = np.add.reduceat(self.nom_cnt * self.nom_cnt, M.nom_off[:-1])
            t = 0.5 * (m + 1) - 0.5 * (q2a[M.nom_of] + 2.0 * self.nom_cnt + 1.0) / (m + 1)
            for a, i in enumerate(M.nom):
                tabs[i] = t[M.nom_off[a]: M.nom_off[a + 1]]
        self.cont = []
        for i, h in M.cont:
            gs = np.sort(h.x[g])
            cs = np.empty(m + 1)
            cs[0] = 0.0
            np.cumsum(gs, out=cs[1:])
            vals = gs.tolist()
            mean, med = cs[-1] / m, vals[(m - 1) // 2]
            il += sum(abs(v - mean) for v in vals)
            opt += sum(abs(v - med) for v in vals)
            self.cont.append((gs, cs))
            mu = (cs[-1] + h.values) / (m + 1)
            t = abs_dev(gs, cs, mu)
            t += np.abs(h.values - mu)
            tabs[i] = t
        self.ord = []
        self.ord_opt = 0.0
        for i, h in M.ord:
            cnt = np.bincount(h.code[g], minlength=h.size).astype(np.float64)
            v = float(h.il_counts(cnt[:, None])[0])
            il += v
            opt += v
            self.ord_opt += v
            self.ord.append(cnt)
            tabs[i] = h.table(cnt, m)
        self.sem = []
        self.sem_opt = 0.0
        for i, h in M.sem:
            u, cu, d_g, tab = h.group(h.code[g])
            v = float(d_g.min())
            il += v
            opt += v
            self.sem_opt += v
            self.sem.append((u, cu, d_g))
            tabs[i] = tab
        self.il, self.opt = il, opt
        self.tabs = tabs


class Classes:
    """The formed classes Q in order of formation (slots 0..count-1; a merged class is
    removed and later slots shift down), with the statistics the bounds and step 3 use."""

    def __init__(self, M: Model, n_s: int, capacity: int) -> None:
        self.M = M
        self.n_s = n_s
        self.members: list[np.ndarray] = []
        self.memtot: list[list[np.ndarray]] = [[] for _ in M.sem]  # per member: total distance to its class
        self.count = 0
        self.cap = 0
        self._fields: list[str] = []
        self._summary: tuple[float, int] | None = None
        self._alloc(capacity)

    def summary(self) -> tuple[float, int]:
        """(least OPT, largest size) over the classes, for the global merge bound."""
        if self._summary is None:
            nq = self.count
            self._summary = (float(self.optall[:nq].min()), int(self.size[:nq].max())) if nq else (np.inf, 0)
        return self._summary

    def _alloc(self, cap: int) -> None:
        M = self.M
        spec = {"size": ((), np.int64), "h": ((), np.float64),
                "q2": ((), np.float64), "optnn": ((), np.float64), "optall": ((), np.float64), "oopt": ((), np.float64), "sopt": ((), np.float64),
                "scount": ((self.n_s,), np.int64), "nomcnt": ((M.W,), np.float64),
                "csum": ((len(M.cont),), np.float64), "cmean": ((len(M.cont),), np.float64),
                "cil": ((len(M.cont),), np.float64), "cslope": ((len(M.cont),), np.float64),
                "copt": ((len(M.cont),), np.float64)}
        for a, (_, h) in enumerate(M.ord):
            spec[f"ordcnt{a}"] = ((h.size,), np.float64)
        for a, (_, h) in enumerate(M.sem):
            levels = h.lo.shape[0] + 1
            spec[f"smed{a}"] = ((), np.int64)  # the medoid's code
            spec[f"sil{a}"] = ((), np.float64)  # IL of the class on this attribute
            spec[f"sgt{a}"] = ((levels,), np.float64)  # #members sharing more than q symbols with it
            spec[f"slt{a}"] = ((levels,), np.float64)  # sum of dist[lcp] over members sharing fewer
            spec[f"smin{a}"] = ((levels,), np.float64)  # least member total among those sharing exactly q
        for name, (lead, dtype) in spec.items():
            new = np.zeros(lead + (cap,), dtype=dtype)
            old = getattr(self, name, None)
            if old is not None:
                new[..., : self.count] = old[..., : self.count]
            setattr(self, name, new)
        self._fields = list(spec)
        self.cap = cap

    def set(self, j: int, members: np.ndarray, s_codes: np.ndarray, xlogx: np.ndarray) -> None:
        M = self.M
        n = members.shape[0]
        cnt = np.bincount(s_codes[members], minlength=self.n_s)
        self.size[j] = n
        self.scount[:, j] = cnt
        self.h[j] = float(xlogx[cnt].sum())
        nom = np.bincount(M.nom_codes[members].ravel(), minlength=M.W).astype(np.float64)
        self.nomcnt[:, j] = nom
        self.q2[j] = float(nom @ nom)
        nom_il = 0.5 * n * len(M.nom) - 0.5 * self.q2[j] / n
        opt = 0.0
        for a, (_, h) in enumerate(M.cont):
            s, mean, il, slope, o = h.stats(members)
            self.csum[a, j], self.cmean[a, j], self.cil[a, j], self.cslope[a, j], self.copt[a, j] = s, mean, il, slope, o
            opt += o
        oo = 0.0
        for a, (_, h) in enumerate(M.ord):
            c = np.bincount(h.code[members], minlength=h.size).astype(np.float64)
            getattr(self, f"ordcnt{a}")[:, j] = c
            oo += float(h.il_counts(c[:, None])[0])
        ss = 0.0
        for a, (_, h) in enumerate(M.sem):
            codes = h.code[members]
            tot = h.totals(np.sort(codes), codes)
            self.memtot[a][j] = tot
            best = tot.min()
            med = int(codes[tot == best].min())
            ss += float(best)
            q = (h.lo[:, codes] == h.lo[:, med][:, None]).sum(axis=0)
            levels = h.lo.shape[0] + 1
            qc = np.bincount(q, minlength=levels).astype(np.float64)
            getattr(self, f"smed{a}")[j] = med
            getattr(self, f"sil{a}")[j] = best
            getattr(self, f"sgt{a}")[:, j] = qc[::-1].cumsum()[::-1] - qc
            getattr(self, f"slt{a}")[:, j] = np.concatenate(([0.0], np.cumsum(qc * h.dist)[:-1]))
            qmin = np.full(levels, np.inf)
            np.minimum.at(qmin, q, tot)
            getattr(self, f"smin{a}")[:, j] = qmin
        self.oopt[j], self.sopt[j] = oo, ss
        self.optnn[j] = opt + oo + ss  # OPT of the non-nominal attributes
        self.optall[j] = nom_il + opt + oo + ss
        self.members[j] = members
        self._summary = None

    def add(self, members: np.ndarray, s_codes: np.ndarray, xlogx: np.ndarray) -> int:
        if self.count == self.cap:
            self._alloc(2 * self.cap)
        j = self.count
        self.count += 1
        self.members.append(members)
        for lst in self.memtot:
            lst.append(members)
        self.set(j, members, s_codes, xlogx)
        return j

    def remove(self, j: int) -> np.ndarray:
        """Take class ``j`` out of Q (it is merged into G); return its members."""
        members = self.members.pop(j)
        for lst in self.memtot:
            lst.pop(j)
        for name in self._fields:
            a = getattr(self, name)
            a[..., j: self.count - 1] = a[..., j + 1: self.count]
        self.count -= 1
        self._summary = None
        return members


