"""Code hierarchy tree (CHT) distance for semantic attributes (SPEC section 2; seed 000
Def. 6, eq. 8-9).

A code of ``L = h - 1`` symbols is a root-to-leaf path: the root (the empty code) is
level 1 and a prefix of length ``p`` is a node at level ``p + 1``. The edge entering level
``j`` has the weight ``W(j-1, j) = 1 / (j-1)**beta`` for ``3 <= j <= h``; ``W(1, 2) = w12``
(default 0, the seed's experiments; ``w12=None`` uses the formula, i.e. 1). For two leaves
whose longest common prefix has length ``p`` (lowest common ancestor ``C`` at level
``p + 1``)::

    dis(P, C)    = sum_{j=p+2..h} W(j-1, j) / sum_{j=2..h} W(j-1, j)
    disSA(P1,P2) = dis(P1, C) + dis(P2, C)           (= 2 * dis(P, C): leaves share a level)

Choices this module makes where SPEC leaves room (binding for anonflow):

* **Normalization.** ``Lmin = 0`` (the distance of a value to itself) and ``Lmax`` = the
  largest ``disSA`` over pairs of values *present* in the column; ``disSA_norm = disSA /
  Lmax`` (all distances are 0 when ``Lmax == 0``, e.g. one distinct code). Because
  ``disSA`` only decreases with the common-prefix length, ``Lmax`` is attained by the pair
  with the shortest common prefix, and over lexicographically sorted codes that is the LCP of
  the first and the last code. The normalized distance is therefore a function of the LCP
  length only, ``(S - cum[p]) / (S - cum[pmin])`` with ``cum[p]`` the weight of the first
  ``p`` edges, ``S = cum[L]`` and ``pmin`` the LCP of the first and last code; it lies in
  [0, 1] for every pair of present values.
* **Equal lengths.** Every code must have the same number of symbols (a CHT's leaves are all
  at level ``h``); the typing step enforces this for semantic columns, and :class:`CHT`
  raises :class:`~anonflow.errors.InputError` otherwise. If every edge weight is 0 (``L = 1``
  with ``w12 = 0``) the eq. 8 denominator is 0 and every distance is defined as 0.
* **Symbols.** ASCII codes are read from Arrow's buffer as an ``(m, L)`` ``uint8`` matrix
  (one byte per symbol); other Unicode codes become an ``(m, L)`` ``uint32`` matrix of code
  points. When the alphabet's ``b`` bits per symbol fit ``L * b <= 64`` (digit codes: up to
  16 symbols), each code is also packed into one ``uint64``, first symbol most significant:
  the LCP of every code with a reference is then one XOR and one ``searchsorted`` against
  the ``L`` block thresholds. Otherwise the LCP is computed level by level (``L`` vectorized
  equality passes over the matrix's columns). Both give the same numbers.
* **Medoid ties.** The medoid minimizes the total distance to the group's values; totals
  within a relative ``1e-9`` of the minimum count as ties (they differ only by rounding) and
  go to the smallest code (lexicographic order).

All indices are positions in :attr:`CHT.codes`, the sorted distinct codes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import ArrayLike, NDArray

from anonflow.api import InputError

__all__ = ["CHT", "edge_weights"]

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: Relative tolerance under which two medoid totals count as a tie.
TIE_RTOL = 1e-9


def edge_weights(length: int, beta: float = 1.0, w12: float | None = 0.0) -> FloatArray:
    """The ``length`` edge weights ``W(1,2), W(2,3), ..., W(h-1,h)`` (``h = length + 1``),
    SPEC section 2: ``W(j-1, j) = 1/(j-1)**beta``, with ``W(1,2) = w12`` unless ``w12`` is None."""
    j = np.arange(2, length + 2, dtype=np.float64)
    w = 1.0 / (j - 1.0) ** float(beta)
    if length and w12 is not None:
        w[0] = float(w12)
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise InputError(f"CHT edge weights must be finite and non-negative (beta={beta}, w12={w12})")
    return w


def _as_string_array(codes: Sequence[str] | pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(codes, pa.ChunkedArray):
        codes = codes.combine_chunks()
    if not isinstance(codes, pa.Array):
        codes = pa.array(list(codes), type=pa.string())
    if pa.types.is_dictionary(codes.type):
        codes = codes.dictionary_decode()
    if not (pa.types.is_string(codes.type) or pa.types.is_large_string(codes.type)):
        codes = codes.cast(pa.string())
    if codes.null_count:
        raise InputError("CHT codes must not be missing (null)")
    return codes


def _symbol_matrix(codes: pa.Array) -> NDArray[np.uint8] | NDArray[np.uint32]:
    """``(m, L)`` matrix of the symbols of equal-length codes, read from Arrow's buffers."""
    m = len(codes)
    if m == 0:
        return np.zeros((0, 0), dtype=np.uint8)
    chars = pc.utf8_length(codes)
    lo, hi = pc.min(chars).as_py(), pc.max(chars).as_py()
    if lo != hi:
        odd = pc.filter(codes, pc.not_equal(chars, lo))[0].as_py()
        raise InputError(f"CHT codes need one length; {codes[0].as_py()!r} has {lo} symbols but {odd!r} has {len(odd)}")
    length = int(lo)
    nbytes = pc.binary_length(codes)
    if pc.max(nbytes).as_py() == length:  # ASCII: one byte per symbol
        codes = codes.cast(pa.large_string())
        offsets = np.frombuffer(codes.buffers()[1], dtype=np.int64)[codes.offset: codes.offset + m + 1]
        if length == 0:
            return np.zeros((m, 0), dtype=np.uint8)
        data = np.frombuffer(codes.buffers()[2], dtype=np.uint8)
        return data[int(offsets[0]): int(offsets[-1])].reshape(m, length).copy()
    # non-ASCII: m distinct values only (never per record), via numpy's fixed-width unicode
    arr = np.array(codes.to_pylist(), dtype=f"<U{length}")
    return arr.view(np.uint32).reshape(m, length).copy()


def _pack(symbols: np.ndarray) -> tuple[NDArray[np.uint64] | None, NDArray[np.uint64]]:
    """Pack each code into one uint64 (first symbol most significant), ``b`` bits a symbol
    after renumbering the alphabet densely, when ``L * b <= 64``. Then the LCP with a
    reference is a XOR and one ``searchsorted`` against the block thresholds
    ``2**(b*q)``, q = 0..L-1. Returns (None, ...) when the codes do not fit."""
    m, length = symbols.shape
    if m == 0 or length == 0:
        return None, np.zeros(0, dtype=np.uint64)
    alphabet, dense = np.unique(symbols, return_inverse=True)
    bits = max(1, int(np.ceil(np.log2(alphabet.shape[0]))) if alphabet.shape[0] > 1 else 1)
    if bits * length > 64:
        return None, np.zeros(0, dtype=np.uint64)
    dense = dense.reshape(m, length).astype(np.uint64)
    packed = np.zeros(m, dtype=np.uint64)
    for p in range(length):  # L levels
        packed |= dense[:, p] << np.uint64(bits * (length - 1 - p))
    thresholds = np.array([1 << (bits * q) for q in range(length)], dtype=np.uint64)
    return packed, thresholds


class CHT:
    """Code hierarchy tree over a set of equal-length codes (SPEC section 2).

    ``codes`` may hold repeats and come in any order; the tree keeps the sorted distinct
    codes (:attr:`codes`) and every index below refers to them.
    """

    def __init__(self, codes: Sequence[str] | pa.Array | pa.ChunkedArray, beta: float = 1.0,
                 w12: float | None = 0.0) -> None:
        arr = _as_string_array(codes)
        distinct = pc.unique(arr)
        self.codes: pa.Array = distinct.take(pc.array_sort_indices(distinct))
        #: (m, L) symbol matrix, row i = the symbols of ``codes[i]``.
        self.symbols = _symbol_matrix(self.codes)
        self.m, self.length = int(self.symbols.shape[0]), int(self.symbols.shape[1])
        #: symbols column by column (C-contiguous columns), for the level-by-level LCP fallback.
        self._columns = np.ascontiguousarray(self.symbols.T)
        self._packed, self._thresholds = _pack(self.symbols)
        self.beta = float(beta)
        self.w12 = None if w12 is None else float(w12)
        #: edge weights W(1,2) .. W(h-1,h).
        self.weights = edge_weights(self.length, self.beta, self.w12)
        #: cum[p] = weight of the first p edges (p = 0..L).
        self.cum = np.concatenate([[0.0], np.cumsum(self.weights)])
        total = float(self.cum[-1])
        #: LCP length of the lexicographically first and last codes = the minimum LCP of any pair.
        self.pmin = int(self._lcp_index(np.array([0]), np.array([self.m - 1]))[0]) if self.m else self.length
        #: raw disSA (eq. 9) by LCP length p = 0..L.
        self.dis_sa_by_lcp = 2.0 * (total - self.cum) / total if total > 0 else np.zeros(self.length + 1)
        self.Lmin = 0.0
        self.Lmax = float(self.dis_sa_by_lcp[self.pmin]) if self.m else 0.0
        #: normalized distance by LCP length p = 0..L.
        self.distance_by_lcp = self.dis_sa_by_lcp / self.Lmax if self.Lmax > 0 else np.zeros(self.length + 1)

    def __repr__(self) -> str:
        return f"CHT(m={self.m}, length={self.length}, beta={self.beta}, w12={self.w12}, Lmax={self.Lmax:.6g})"

    # -- indexing -------------------------------------------------------------------------

    def index(self, code: str) -> int:
        """Position of ``code`` in :attr:`codes` (KeyError if absent)."""
        i = pc.index(self.codes, pa.scalar(code, type=self.codes.type)).as_py()
        if i < 0:
            raise KeyError(code)
        return int(i)

    def indices(self, codes: Sequence[str] | pa.Array | pa.ChunkedArray) -> NDArray[np.int32]:
        """Positions of many codes in :attr:`codes` (InputError if one is absent)."""
        arr = _as_string_array(codes)
        idx = pc.index_in(arr, value_set=self.codes)
        if idx.null_count:
            bad = pc.filter(arr, pc.is_null(idx))[0].as_py()
            raise InputError(f"code {bad!r} is not in the code hierarchy tree")
        return idx.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)

    def _ref(self, ref: int | str | np.integer) -> int:
        if isinstance(ref, str):
            return self.index(ref)
        i = int(ref)
        if not 0 <= i < self.m:
            raise IndexError(f"code index {i} out of range 0..{self.m - 1}")
        return i

    # -- LCP and distances ----------------------------------------------------------------

    def _lcp_index(self, i: np.ndarray, j: np.ndarray) -> IntArray:
        """Elementwise LCP length of codes ``i`` and ``j`` (equal-shape 1-d index arrays)."""
        if self._packed is not None:
            return self._lcp_xor(self._packed[i] ^ self._packed[j])
        lcp = np.zeros(i.shape[0], dtype=np.int64)
        alive = np.ones(i.shape[0], dtype=bool)
        for col in self._columns:  # L levels, each one vectorized pass
            alive &= col[i] == col[j]
            lcp += alive
        return lcp

    def _lcp_xor(self, x: np.ndarray) -> IntArray:
        # x = 0: LCP = L; else the highest differing symbol sits in bit block q (0 = the last
        # symbol), i.e. 2**(b*q) <= x < 2**(b*(q+1)), and the LCP is L - 1 - q
        return self.length - np.searchsorted(self._thresholds, x, side="right")

    def lcp_to(self, ref: int | str) -> IntArray:
        """``(m,)`` LCP length of every code with the reference code."""
        r = self._ref(ref)
        if self._packed is not None:
            return self._lcp_xor(self._packed ^ self._packed[r])
        lcp = np.zeros(self.m, dtype=np.int64)
        alive = np.ones(self.m, dtype=bool)
        for col in self._columns:
            alive &= col == col[r]
            lcp += alive
        return lcp

    def lcp(self, i: ArrayLike, j: ArrayLike) -> IntArray:
        """Elementwise LCP length of codes ``i`` and ``j`` (index arrays, broadcast together)."""
        i = np.asarray(i, dtype=np.intp)
        j = np.asarray(j, dtype=np.intp)
        shape = np.broadcast(i, j).shape
        i, j = np.broadcast_to(i, shape).ravel(), np.broadcast_to(j, shape).ravel()
        return self._lcp_index(i, j).reshape(shape)

    def distance_to(self, ref: int | str) -> FloatArray:
        """``(m,)`` normalized CHT distance of every code to ``ref`` (index or code string)."""
        return self.distance_by_lcp[self.lcp_to(ref)]

    def pairwise(self, i_codes: ArrayLike, j_codes: ArrayLike) -> FloatArray:
        """Elementwise normalized CHT distance of codes ``i_codes[t]`` and ``j_codes[t]``."""
        return self.distance_by_lcp[self.lcp(i_codes, j_codes)]

    def raw_distance(self, a: int | str, b: int | str) -> float:
        """Unnormalized ``disSA`` (eq. 9) of two codes."""
        return float(self.dis_sa_by_lcp[self.lcp(self._ref(a), self._ref(b))])

    def distance(self, a: int | str, b: int | str) -> float:
        """Normalized CHT distance of two codes."""
        return float(self.distance_by_lcp[self.lcp(self._ref(a), self._ref(b))])

    def matrix(self, indices: ArrayLike | None = None) -> FloatArray:
        """Dense normalized distance matrix among ``indices`` (default: all codes). O(u^2 L):
        for small sets and tests."""
        idx = np.arange(self.m) if indices is None else np.asarray(indices, dtype=np.intp)
        return self.pairwise(idx[:, None], idx[None, :])

    # -- medoids --------------------------------------------------------------------------

    def medoid(self, indices: ArrayLike, counts: ArrayLike | None = None) -> int:
        """The member value with the least total CHT distance to the group's values
        (SPEC section 1, semantic centroid); ties go to the smallest code.

        ``indices`` are code positions of the group's values (repeats allowed); ``counts``
        optionally gives each entry's multiplicity.
        """
        idx = np.asarray(indices, dtype=np.int64).ravel()
        if idx.size == 0:
            raise ValueError("the medoid of an empty group is undefined")
        return int(self.medoids(idx, np.zeros(idx.size, dtype=np.int64), 1, counts)[0])

    def medoids(self, values: ArrayLike, labels: ArrayLike, groups: int | None = None,
                counts: ArrayLike | None = None) -> IntArray:
        """Medoid code of every group at once: ``values[t]`` (a code position) belongs to group
        ``labels[t]`` in ``0..groups-1``. Empty groups get -1.

        The total distance of a candidate ``x`` to a group is
        ``sum_v c_v * (S - cum[lcp(x, v)]) / (S - cum[pmin])``, so the medoid maximizes
        ``sum_{p=1..L} W_p * N_p(x)`` where ``N_p(x)`` counts the group's values sharing the
        first ``p`` symbols of ``x``. With the entries sorted by (group, code), those sharers
        form runs, so each level costs one ``reduceat``: ``O(n L)`` overall, no pair matrix.
        """
        v = np.asarray(values, dtype=np.int64).ravel()
        lab = np.asarray(labels, dtype=np.int64).ravel()
        if v.shape != lab.shape:
            raise ValueError("values and labels must have the same length")
        g = (int(lab.max()) + 1 if lab.size else 0) if groups is None else int(groups)
        out = np.full(g, -1, dtype=np.int64)
        if v.size == 0:
            return out
        if lab.min() < 0 or lab.max() >= g:
            raise ValueError(f"group labels must lie in 0..{g - 1}")
        c = np.ones(v.size) if counts is None else np.asarray(counts, dtype=np.float64).ravel()
        order = np.lexsort((v, lab))
        vs, ls, cs = v[order], lab[order], c[order]
        n = vs.size
        new_group = np.empty(n, dtype=bool)
        new_group[0] = True
        np.not_equal(ls[1:], ls[:-1], out=new_group[1:])
        # LCP of each entry with its predecessor (sorted, so runs of shared prefixes are contiguous)
        adj = np.empty(n, dtype=np.int64)
        adj[0] = -1
        if n > 1:
            adj[1:] = self._lcp_index(vs[:-1], vs[1:])
        adj[new_group] = -1
        score = np.zeros(n)
        for p in range(1, self.length + 1):  # L levels, each a vectorized pass
            w = self.weights[p - 1]
            if w == 0.0:
                continue
            starts = np.flatnonzero(adj < p)
            sums = np.add.reduceat(cs, starts)
            score += w * np.repeat(sums, np.diff(np.append(starts, n)))
        gstarts = np.flatnonzero(new_group)
        best = np.maximum.reduceat(score, gstarts)
        per_entry_best = np.repeat(best, np.diff(np.append(gstarts, n)))
        cand = score >= per_entry_best - TIE_RTOL * np.maximum(1.0, np.abs(per_entry_best))
        # the first candidate of each group in (group, code) order is its smallest code
        pos = np.where(cand, np.arange(n), n)
        first = np.minimum.reduceat(pos, gstarts)
        out[ls[gstarts]] = vs[first]
        return out

