"""Generalized values, information loss and DS distances of L-clustering (SPEC section 5).

Seed 001 (L-clustering for l-diversity) publishes every quasi-identifier (QI) of a class as
one *generalized value*:

* an **ordered** attribute (continuous, or ordinal given as its rank) becomes an interval
  ``[a, b]``; an original value ``v`` is the degenerate interval ``[v, v]``;
* an **unordered** attribute (nominal, semantic) becomes a *set* of categories; an original
  value is a singleton.

This module works on plain numpy arrays (it does not depend on the encoding module):
ordered attributes are ``float64`` values of shape ``(n, d_ord)``, unordered attributes are
integer codes in ``[0, m_j)`` of shape ``(n, d_unord)``. A :class:`Domain` carries, per
ordered attribute, the resolution unit ``res`` and the domain ``[dmin, dmax]``, per
unordered attribute the cardinality ``m``, and the QI weights.

Representation
--------------
A :class:`Generalized` holds ``g`` generalized tuples (records or class representatives):
``lo``/``hi`` of shape ``(g, d_ord)`` (the intervals) and ``bits`` of shape
``(g, d_unord, W)``, ``uint64`` words with ``W = ceil(max_j m_j / 64)`` (one word for up to
64 categories, any ``m`` works): bit ``c`` of attribute ``j`` is set iff category ``c`` is
in the set. Set sizes are popcounts (``np.bitwise_count``, numpy >= 2) and are cached in
``sizes``. ``counts`` are class sizes (1 for a record). Everything is vectorized over the
``g`` tuples; no Python set exists per record.

phi (SPEC section 5): :func:`join` takes ``[min a, max b]`` and the union (bitwise OR).
It is associative, commutative and idempotent on the *values*; ``counts`` add (``join``
is the merge of two classes).

Loss (SPEC section 5, seed 001 Def. 6-12), for ``x`` generalized to ``x*`` (``x`` within
``x*``):

* ordered: ``L(x, x*) = (b* - a* + res) / (b - a + res)`` if ``x != x*`` else ``0``; the
  seed writes ``+1``, which is the resolution unit of an integer attribute; a real-valued
  attribute passes its own ``res`` (e.g. 0.01);
* unordered: ``L(y, y*) = |y*| / |y|`` if ``y != y*`` else ``0``;
* tuple loss ``L(t, t*) = sum_i w_i L(t[X_i], t*[X_i])`` (weights default 1, Def. 8-9);
* ``L(D, D*) = sum over tuples``; ``RL(D, D*) = L(D, D*) / L(D, D_c)``, where ``D_c``
  generalizes every QI of every record to the whole domain: ``[dmin, dmax]`` and the set of
  all ``m`` categories (:meth:`Generalized.full`). ``RL`` is returned as a fraction (the
  seed prints it times 100%).

The "else 0" rule, and what it means for a representative equal to a member
---------------------------------------------------------------------------
The comparison ``x != x*`` is made **per attribute**, exactly as the seed writes it. An
attribute that generalization leaves unchanged costs 0, not the ratio 1/1 = 1; any change
costs *more than 1*: the ratio of a strictly wider interval / strictly larger set. So the
loss of one attribute takes values in ``{0}`` union ``(1, max]``: it jumps from 0 to at
least ``(b - a + 2 res) / (b - a + res)`` (2 for a raw integer) or ``(|y| + 1) / |y|``,
and is at most ``(dmax - dmin + res) / (b - a + res)`` or ``m / |y|``. Neither kind is
bounded by 1; what does hold is ``L(x, x*) <= L(x, whole domain)``, hence
``0 <= RL <= 1``.

Example (age ordered with res = 1, country unordered). Class
``G = {t1 = (50, China), t2 = (52, China)}`` has representative
``t_g = phi(t1, t2) = ([50-52], {China})``. Each member's loss is
``age: (52 - 50 + 1) / (50 - 50 + 1) = 3`` plus ``country: 0`` (``{China}`` is unchanged,
not ``1/1``), so ``L(t1, t_g) = L(t2, t_g) = 3`` and the class costs 6. Add
``t3 = ([50-52], {China, India})`` -- itself already generalized, e.g. the representative of
a merged sub-class -- and ``t_g`` becomes ``([50-52], {China, India})``, which *equals*
``t3``: ``t3`` costs 0 on both attributes, while ``t1`` and ``t2`` now cost
``3 + 2/1 = 5`` each. In general a member (or a sub-class representative) that already
covers the class's whole range on an attribute pays nothing there; with raw records that
happens only when all members share that value. The same rule drives the DS distances:
in ``DS(t, G)``, a record ``t`` inside ``G``'s representative leaves ``t_g`` unchanged, so
``|G| * L(t_g, t_g*) = 0``, and duplicates of a singleton class are at distance 0.

Distances (seed 001 Def. 13-16), with ``t*`` the phi of the two arguments:

* ``DS(t1, t2) = L(t1, t*) + L(t2, t*)`` -- :func:`~anonflow_std.common.ds_distance.ds_records`;
* ``DS(t, G) = L(t, t_g*) + |G| * L(t_g, t_g*)``, ``t_g* = phi(t, t_g)`` --
  :func:`ds_record_class`;
* ``DS(G, H) = |G| * L(t_g, t*) + |H| * L(t_h, t*)``, ``t* = phi(t_g, t_h)`` --
  :func:`ds_classes` (SPEC: the seed's ``t_h*``/``t_g*`` there is a typo for ``t*``).

(The seed's Def. 15 prints ``DS(t, t_g*) + |G| * DS(t_g, t_g*)``; as in the SPEC, the
terms are the losses ``L`` of Def. 8-9.) ``L(t_g, t_g*)`` is the loss of moving the
*representative* ``t_g`` to ``t_g*`` with the same formulas: ``t_g``'s interval is
``[a, b]`` (so the ratio is of the widths of the new and the old class interval) and
``|t_g*| / |t_g|`` for sets, 0 for an attribute that does not change. All three
broadcast: one class against all candidate records (the greedy step
``argmin DS(t_i, G)``), one record against all classes, one class against all classes.

Performance: arrays are stored column-major (the tuple index varies fastest), so the
broadcast against one tuple runs long contiguous loops; a :class:`DSWorkspace` passed as
``work=`` removes every allocation from repeated DS calls (fresh multi-megabyte temporaries
cost more than the arithmetic). One class against 45,222 records with 8 attributes takes
about 1.5-3 ms.

Publication: :func:`render` gives strings (``[50-52]``, ``50``, ``{China,India}``,
``China``); :func:`to_arrow` gives the structured form for Parquet (two float64 columns
``<name>_lo``/``<name>_hi`` per interval, one ``list<string>`` column per set).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "Domain",
    "Generalized",
    "join",
    "attribute_loss",
    "tuple_loss",
    "covers",
    "dataset_loss",
    "full_generalization_loss",
    "relative_loss",
    "render",
    "to_arrow",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BitArray = NDArray[np.uint64]

_WORD_BITS = 64
_ONE = np.uint64(1)


def _n_words(card: NDArray[np.int64]) -> int:
    """Words per bitset: enough for the largest cardinality, at least one."""
    return max(1, -(-int(card.max()) // _WORD_BITS)) if card.size else 1


def _popcount(bits: BitArray) -> NDArray[Any]:
    """Set sizes ``(..., d_unord)`` of bitsets ``(..., d_unord, W)``."""
    if bits.shape[-1] == 1:
        return np.bitwise_count(bits[..., 0])  # uint8, at most 64
    pop = np.bitwise_count(bits)
    total = pop[..., 0].astype(np.int32)
    for k in range(1, bits.shape[-1]):  # word by word: contiguous loops
        total += pop[..., k]
    return total


def _vector(x: ArrayLike | None, d: int, default: float, what: str) -> FloatArray:
    if x is None:
        return np.full(d, default, dtype=np.float64)
    arr = np.array(x, dtype=np.float64).reshape(-1)
    if arr.shape == (1,) and d != 1:
        arr = np.repeat(arr, d)
    if arr.shape != (d,):
        raise ValueError(f"{what} must have {d} entries, got {arr.shape[0]}")
    return arr


@dataclass(frozen=True, eq=False)
class Domain:
    """The QI space: per ordered attribute ``res`` and ``[dmin, dmax]``, per unordered
    attribute the cardinality ``m``, and the QI weights (SPEC section 5, seed 001 Def. 9).

    ``res`` is the "+1" of the seed's ordered loss: the attribute's resolution unit (1 for
    integers and ranks). Weights must be >= 0 (default 1). Ordered attributes come first
    in every per-attribute output, then unordered ones.
    """

    res: FloatArray
    dmin: FloatArray
    dmax: FloatArray
    card: IntArray
    w_ord: FloatArray | None = None
    w_unord: FloatArray | None = None
    ordered_names: tuple[str, ...] | None = None
    unordered_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        dmin = np.array(self.dmin, dtype=np.float64).reshape(-1)
        d_ord = dmin.shape[0]
        dmax = _vector(self.dmax, d_ord, 0.0, "dmax")
        res = _vector(self.res, d_ord, 1.0, "res")
        card = np.array(self.card, dtype=np.int64).reshape(-1)
        d_unord = card.shape[0]
        w_ord = _vector(self.w_ord, d_ord, 1.0, "w_ord")
        w_unord = _vector(self.w_unord, d_unord, 1.0, "w_unord")
        if not (np.all(np.isfinite(dmin)) and np.all(np.isfinite(dmax))):
            raise ValueError("domain bounds must be finite")
        if np.any(dmin > dmax):
            raise ValueError("dmin must not exceed dmax")
        if not np.all(res > 0) or not np.all(np.isfinite(res)):
            raise ValueError("res (the resolution unit) must be positive and finite")
        if np.any(card < 1):
            raise ValueError("every unordered attribute needs at least one category")
        for w in (w_ord, w_unord):
            if not np.all(np.isfinite(w)) or np.any(w < 0):
                raise ValueError("weights must be finite and >= 0 (seed 001 Def. 9)")
        on = tuple(self.ordered_names) if self.ordered_names is not None else tuple(
            f"x{i}" for i in range(d_ord))
        un = tuple(self.unordered_names) if self.unordered_names is not None else tuple(
            f"y{j}" for j in range(d_unord))
        if len(on) != d_ord or len(un) != d_unord:
            raise ValueError("one name per attribute is needed")
        if len(set(on + un)) != d_ord + d_unord:
            raise ValueError("attribute names must be distinct")
        for name, val in (("res", res), ("dmin", dmin), ("dmax", dmax), ("card", card),
                          ("w_ord", w_ord), ("w_unord", w_unord), ("ordered_names", on),
                          ("unordered_names", un)):
            object.__setattr__(self, name, val)
        object.__setattr__(self, "_words", _n_words(card))

    @classmethod
    def from_data(cls, values: ArrayLike, codes: ArrayLike, *, res: ArrayLike,
                  card: ArrayLike | None = None, **kwargs: Any) -> "Domain":
        """A domain whose ordered bounds are the observed min and max of ``values``
        (``(n, d_ord)``) and whose cardinalities default to ``max code + 1`` per column.

        When every category is present, ``D_c`` is then exactly phi of all of ``D`` -- the
        seed's Def. 11 ("the" fully generalized data set, unique given D and QI).
        """
        v = np.asarray(values, dtype=np.float64)
        c = np.asarray(codes)
        if v.ndim != 2 or c.ndim != 2 or v.shape[0] != c.shape[0]:
            raise ValueError("values (n, d_ord) and codes (n, d_unord) are needed")
        if v.shape[0] == 0:
            raise ValueError("cannot infer a domain from no records")
        if card is None:
            card = c.max(axis=0).astype(np.int64) + 1 if c.shape[1] else np.zeros(0, np.int64)
        if v.shape[1] == 0:
            return cls(res=np.zeros(0), dmin=np.zeros(0), dmax=np.zeros(0), card=card,
                       **kwargs)
        return cls(res=res, dmin=v.min(axis=0), dmax=v.max(axis=0), card=card, **kwargs)

    @property
    def d_ord(self) -> int:
        return int(self.dmin.shape[0])

    @property
    def d_unord(self) -> int:
        return int(self.card.shape[0])

    @property
    def n_words(self) -> int:
        """``W``: uint64 words per bitset."""
        return int(self._words)  # type: ignore[attr-defined]

    @property
    def names(self) -> tuple[str, ...]:
        assert self.ordered_names is not None and self.unordered_names is not None
        return self.ordered_names + self.unordered_names


class Generalized:
    """``g`` generalized tuples: intervals ``lo``/``hi`` ``(g, d_ord)``, bitset ``bits``
    ``(g, d_unord, W)``, class sizes ``counts`` ``(g,)`` and optional class ``ids``.

    ``sizes`` ``(g, d_unord)`` caches the set sizes. Instances are treated as immutable.
    Arrays are stored column-major (Fortran order: the tuple index varies fastest), so
    that "one against many" broadcasting runs contiguous inner loops over the tuples --
    with row-major ``(n, 7, 1)`` bitsets the OR with one class is about 7x slower.
    """

    __slots__ = ("lo", "hi", "bits", "counts", "sizes", "ids", "_inv", "_single", "_points")

    lo: FloatArray
    hi: FloatArray
    bits: BitArray
    counts: IntArray
    sizes: NDArray[Any]
    ids: NDArray[Any] | None

    def __init__(self, lo: ArrayLike, hi: ArrayLike, bits: ArrayLike,
                 counts: ArrayLike | None = None, *, sizes: ArrayLike | None = None,
                 ids: ArrayLike | None = None) -> None:
        self.lo = np.asarray(lo, dtype=np.float64, order="F")
        self.hi = np.asarray(hi, dtype=np.float64, order="F")
        self.bits = np.asarray(bits, dtype=np.uint64, order="F")
        if self.lo.ndim != 2 or self.hi.shape != self.lo.shape or self.bits.ndim != 3:
            raise ValueError("lo/hi must be (g, d_ord) and bits (g, d_unord, W)")
        g = self.lo.shape[0]
        if self.bits.shape[0] != g:
            raise ValueError("lo and bits disagree on the number of tuples")
        self.counts = (np.ones(g, dtype=np.int64) if counts is None
                       else np.asarray(counts, dtype=np.int64).reshape(-1))
        if self.counts.shape != (g,):
            raise ValueError("counts must have one entry per tuple")
        self.sizes = (_popcount(self.bits) if sizes is None
                      else np.asarray(sizes, order="F"))
        if self.sizes.shape != self.bits.shape[:2]:
            raise ValueError("sizes must be (g, d_unord)")
        if self.sizes.size and not np.all(self.sizes):
            raise ValueError("a generalized set must not be empty")
        self.ids = None if ids is None else np.asarray(ids)
        self._inv: FloatArray | None = None
        self._single: bool | None = None
        self._points: bool | None = None

    @property
    def inv_sizes(self) -> FloatArray:
        """``1 / sizes`` as float64 (cached)."""
        if self._inv is None:
            self._inv = np.divide(1.0, self.sizes, dtype=np.float64)
        return self._inv

    @property
    def all_singletons(self) -> bool:
        """Whether every set has exactly one element (true for raw records; cached)."""
        if self._single is None:
            self._single = bool(np.all(self.sizes == 1))
        return self._single

    @property
    def all_points(self) -> bool:
        """Whether every interval is a single value (true for raw records; cached)."""
        if self._points is None:
            self._points = bool(np.all(self.lo == self.hi))
        return self._points

    # -- constructors ---------------------------------------------------------------------

    @classmethod
    def from_records(cls, values: ArrayLike | None, codes: ArrayLike | None,
                     domain: Domain) -> "Generalized":
        """Each record generalized to itself: ``lo = hi = value``, singleton sets.

        ``values`` ``(n, d_ord)`` float, ``codes`` ``(n, d_unord)`` int in ``[0, m_j)``;
        ``None`` for a kind of attribute the domain does not have.
        """
        if values is None:
            values = np.zeros((0 if codes is None else len(np.asarray(codes)), 0))
        if codes is None:
            codes = np.zeros((len(np.asarray(values)), 0), dtype=np.int64)
        v = np.array(values, dtype=np.float64, order="F")
        c = np.asarray(codes)
        if v.ndim == 1 and domain.d_ord == 1:
            v = v[:, None]
        if c.ndim == 1 and domain.d_unord == 1:
            c = c[:, None]
        n = v.shape[0] if v.ndim == 2 else -1
        if v.shape != (n, domain.d_ord) or c.shape != (n, domain.d_unord):
            raise ValueError(f"expected values (n, {domain.d_ord}) and codes "
                             f"(n, {domain.d_unord}); got {v.shape} and {c.shape}")
        if not np.issubdtype(c.dtype, np.integer) and c.size:
            raise ValueError("codes must be integers")
        c = np.asarray(c, dtype=np.int64, order="F")  # column-major like the bitsets
        if c.size and (c.min() < 0 or np.any(c >= domain.card)):
            raise ValueError("codes must lie in [0, m) for every unordered attribute")
        if v.size:
            if not np.all(np.isfinite(v)):
                raise ValueError("ordered values must be finite (no NaN: SPEC section 1)")
            if np.any(v < domain.dmin) or np.any(v > domain.dmax):
                raise ValueError("ordered values must lie within [dmin, dmax]")
        W = domain.n_words
        bits = np.zeros((n, domain.d_unord, W), dtype=np.uint64, order="F")
        word = c >> 6
        bit = np.left_shift(_ONE, (c & 63).astype(np.uint64))
        if W == 1:
            bits[..., 0] = bit
        else:
            np.put_along_axis(bits, word[..., None], bit[..., None], axis=-1)
        sizes = np.ones((n, domain.d_unord), dtype=np.uint8 if W == 1 else np.int32,
                        order="F")
        return cls(v, v.copy(order="F"), bits, sizes=sizes)

    @classmethod
    def from_labels(cls, records: "Generalized", labels: ArrayLike) -> "Generalized":
        """Representatives of all classes at once: ``t_g = phi(members)`` per label.

        Row ``c`` is the class with the ``c``-th smallest distinct label (kept in ``ids``);
        ``counts`` are the class sizes (sums of the members' counts). One stable sort and
        ``ufunc.reduceat`` (min, max, bitwise OR) -- no loop over classes.
        """
        lab = np.asarray(labels).reshape(-1)
        n = len(records)
        if lab.shape != (n,):
            raise ValueError("one label per record is needed")
        if n == 0:
            return cls(records.lo[:0], records.hi[:0], records.bits[:0],
                       np.zeros(0, np.int64), ids=lab[:0])
        order = np.argsort(lab, kind="stable")
        sl = lab[order]
        starts = np.flatnonzero(np.concatenate(([True], sl[1:] != sl[:-1])))
        lo = np.minimum.reduceat(records.lo[order], starts, axis=0)
        hi = np.maximum.reduceat(records.hi[order], starts, axis=0)
        bits = np.bitwise_or.reduceat(records.bits[order], starts, axis=0)
        counts = np.add.reduceat(records.counts[order], starts)
        return cls(lo, hi, bits, counts, ids=sl[starts])

    @classmethod
    def full(cls, domain: Domain, count: int = 1) -> "Generalized":
        """One tuple generalized to the whole domain (every record's value in ``D_c``)."""
        W = domain.n_words
        nbits = np.clip(domain.card[:, None] - _WORD_BITS * np.arange(W)[None, :], 0,
                        _WORD_BITS).astype(np.uint64)
        partial = np.left_shift(_ONE, np.minimum(nbits, 63)) - _ONE
        words = np.where(nbits == _WORD_BITS, ~np.uint64(0), partial).astype(np.uint64)
        return cls(domain.dmin[None, :].copy(), domain.dmax[None, :].copy(), words[None],
                   np.array([count]))

    # -- access ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.lo.shape[0])

    def __repr__(self) -> str:
        return (f"Generalized(g={len(self)}, d_ord={self.lo.shape[1]}, "
                f"d_unord={self.bits.shape[1]}, W={self.bits.shape[2]})")

    def take(self, index: ArrayLike) -> "Generalized":
        """Rows ``index`` (an int array, a slice or a boolean mask), as a new object."""
        idx = index if isinstance(index, slice) else np.asarray(index)
        if not isinstance(idx, slice) and idx.ndim == 0:
            idx = idx.reshape(1)
        return Generalized(self.lo[idx], self.hi[idx], self.bits[idx], self.counts[idx],
                           sizes=self.sizes[idx],
                           ids=None if self.ids is None else self.ids[idx])

    __getitem__ = take

    def rows_of(self, labels: ArrayLike) -> IntArray:
        """Row of each label (class ids from :meth:`from_labels`; plain rows otherwise)."""
        lab = np.asarray(labels).reshape(-1)
        if self.ids is None:
            rows = lab.astype(np.int64)
            if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
                raise ValueError("row index out of range")
            return rows
        if len(self) == 0:
            if lab.size:
                raise ValueError("a label has no class in this Generalized")
            return np.zeros(0, dtype=np.int64)
        sorter = None if np.all(self.ids[1:] > self.ids[:-1]) else np.argsort(self.ids)
        pos = np.minimum(np.searchsorted(self.ids, lab, sorter=sorter), len(self) - 1)
        rows = pos if sorter is None else sorter[pos]
        if np.any(self.ids[rows] != lab):
            raise ValueError("a label has no class in this Generalized")
        return rows.astype(np.int64)

    def expand(self, labels: ArrayLike) -> "Generalized":
        """Each record's published value: the representative of its label's class."""
        return self.take(self.rows_of(labels))

    def same_values(self, other: "Generalized") -> NDArray[np.bool_]:
        """Elementwise (broadcasting) equality of the generalized values (not counts)."""
        return (np.all(self.lo == other.lo, axis=-1) & np.all(self.hi == other.hi, axis=-1)
                & np.all(self.bits == other.bits, axis=(-2, -1)))


# -- phi ----------------------------------------------------------------------------------


def join(a: Generalized, b: Generalized) -> Generalized:
    """phi(a, b) (SPEC section 5): ``[min lo, max hi]`` and bitwise OR, broadcasting
    (``len(a) == 1`` joins one tuple with many). ``counts`` add (class merge)."""
    bits = a.bits | b.bits
    return Generalized(np.minimum(a.lo, b.lo), np.maximum(a.hi, b.hi), bits,
                       a.counts + b.counts)


def covers(x: Generalized, xstar: Generalized) -> NDArray[np.bool_]:
    """Whether each ``x*`` generalizes ``x`` (interval and set containment), broadcasting."""
    return (np.all(xstar.lo <= x.lo, axis=-1) & np.all(x.hi <= xstar.hi, axis=-1)
            & np.all((x.bits & ~xstar.bits) == 0, axis=(-2, -1)))


# -- loss ---------------------------------------------------------------------------------


def _ord_loss(lo: FloatArray, hi: FloatArray, lo_s: FloatArray, hi_s: FloatArray,
              res: FloatArray) -> FloatArray:
    """Def. 6: ``(b*-a*+res)/(b-a+res)`` where the interval changed, else 0."""
    changed = (lo_s != lo) | (hi_s != hi)
    ratio = (hi_s - lo_s + res) / (hi - lo + res)
    ratio *= changed
    return ratio


def attribute_loss(x: Generalized, xstar: Generalized,
                   domain: Domain) -> tuple[FloatArray, FloatArray]:
    """Per-attribute loss of generalizing ``x`` to ``x*`` (seed 001 Def. 6-7), broadcasting.

    Returns ``(ordered (g, d_ord), unordered (g, d_unord))``, unweighted. ``x*`` should
    generalize ``x`` (:func:`covers`); the formulas are evaluated literally otherwise.
    ``y != y*`` compares the full bitsets.
    """
    L_ord = _ord_loss(x.lo, x.hi, xstar.lo, xstar.hi, domain.res)
    changed = np.any(x.bits != xstar.bits, axis=-1)
    L_un = np.divide(xstar.sizes, x.sizes, dtype=np.float64)
    L_un *= changed
    return L_ord, L_un


def tuple_loss(x: Generalized, xstar: Generalized, domain: Domain) -> FloatArray:
    """``L(t, t*)`` = weighted sum of the attribute losses (seed 001 Def. 8-9), ``(g,)``."""
    L_ord, L_un = attribute_loss(x, xstar, domain)
    return L_ord @ domain.w_ord + L_un @ domain.w_unord


def _check_published(records: Generalized, published: Generalized) -> None:
    if len(published) not in (1, len(records)):
        raise ValueError("published must hold one tuple per record (or one for all)")
    if not np.all(covers(records, published)):
        raise ValueError("a published value does not generalize its record")


def dataset_loss(records: Generalized, published: Generalized, domain: Domain) -> float:
    """``L(D, D*) = sum_i L(t_i, t_i*)`` (seed 001 Def. 10).

    ``published`` is aligned with ``records`` (e.g. ``reps.expand(labels)``); every
    published value must generalize its record (ValueError otherwise).
    """
    _check_published(records, published)
    return float(tuple_loss(records, published, domain).sum())


def full_generalization_loss(records: Generalized, domain: Domain) -> float:
    """``L(D, D_c)``: every QI of every record generalized to the whole domain (Def. 11)."""
    return dataset_loss(records, Generalized.full(domain), domain)


def relative_loss(records: Generalized, published: Generalized, domain: Domain) -> float:
    """``RL(D, D*) = L(D, D*) / L(D, D_c)`` as a fraction in ``[0, 1]`` (Def. 12).

    ``L(x, x*) <= L(x, domain)`` for every attribute when ``x*`` lies in the domain, hence
    the bound. If ``L(D, D_c) = 0`` (every QI constant: nothing can be lost) RL is 0.
    """
    total = full_generalization_loss(records, domain)
    loss = dataset_loss(records, published, domain)
    return 0.0 if total == 0.0 else loss / total


# -- publication --------------------------------------------------------------------------


def _format_numbers(v: FloatArray) -> NDArray[np.str_]:
    """Shortest round-trip strings; integral values without ``.0``."""
    integral = (v == np.floor(v)) & (np.abs(v) < 2.0**53)
    as_int = np.where(integral, v, 0).astype(np.int64).astype(str)
    return np.where(integral, as_int, v.astype(str))


def _category_table(domain: Domain, categories: Sequence[Sequence[str]] | None,
                    j: int) -> tuple[NDArray[np.str_], IntArray]:
    """Strings of unordered attribute ``j`` by code, and the codes in display order
    (sorted by string; by code when no strings are given)."""
    m = int(domain.card[j])
    if categories is None:
        return np.arange(m).astype(str), np.arange(m)
    cats = np.asarray([str(c) for c in categories[j]])
    if cats.shape != (m,):
        assert domain.unordered_names is not None
        raise ValueError(f"attribute {domain.unordered_names[j]!r}: {m} category "
                         f"strings needed, got {cats.shape[0]}")
    return cats, np.argsort(cats, kind="stable")


def _members(bits: BitArray, m: int) -> NDArray[np.bool_]:
    """``(g, W)`` bitsets -> ``(g, m)`` boolean membership (little-endian bit order)."""
    as_bytes = np.ascontiguousarray(bits, dtype="<u8").view(np.uint8).reshape(
        bits.shape[0], 8 * bits.shape[1])
    return np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :m].astype(bool)


def render(reps: Generalized, domain: Domain,
           categories: Sequence[Sequence[str]] | None = None, *,
           labels: ArrayLike | None = None,
           ordinal_labels: Mapping[str, Sequence[str]] | None = None,
           sep: str = "-") -> dict[str, NDArray[np.object_]]:
    """Readable published values, one object array per attribute (ordered ones first).

    Intervals: ``[50-52]`` (``sep`` between the bounds), a single value if ``lo == hi``,
    integral numbers without ``.0``. An ordinal attribute named in ``ordinal_labels``
    (rank -> category string, ranks 0-based) renders as ``[c_i..c_j]`` (SPEC section 1).
    Sets: ``{China,India}`` with the category strings sorted, a singleton as the bare value.
    ``categories[j]`` are the strings of unordered attribute ``j`` by code (codes as
    strings when ``None``). With ``labels`` the result has one entry per record
    (``reps.rows_of(labels)``); the strings are built once per class, and a set once per
    distinct set.
    """
    rows = None if labels is None else reps.rows_of(labels)
    out: dict[str, NDArray[np.object_]] = {}
    ordinal_labels = ordinal_labels or {}
    assert domain.ordered_names is not None and domain.unordered_names is not None
    for i, name in enumerate(domain.ordered_names):
        lo, hi = reps.lo[:, i], reps.hi[:, i]
        if name in ordinal_labels:
            table = np.asarray([str(s) for s in ordinal_labels[name]])
            if np.any(lo != np.floor(lo)) or np.any(lo < 0) or np.any(hi >= len(table)):
                raise ValueError(f"{name!r}: ordinal ranks must be integers in "
                                 f"[0, {len(table)})")
            slo, shi = table[lo.astype(np.int64)], table[hi.astype(np.int64)]
            both = np.strings.add(np.strings.add(np.strings.add("[", slo), ".."),
                                  np.strings.add(shi, "]"))
        else:
            slo, shi = _format_numbers(lo), _format_numbers(hi)
            both = np.strings.add(np.strings.add(np.strings.add("[", slo), sep),
                                  np.strings.add(shi, "]"))
        col = np.where(lo == hi, slo, both).astype(object)
        out[name] = col if rows is None else col[rows]
    for j, name in enumerate(domain.unordered_names):
        cats, perm = _category_table(domain, categories, j)
        uniq, inv = np.unique(reps.bits[:, j, :], axis=0, return_inverse=True)
        member = _members(uniq, int(domain.card[j]))[:, perm]
        sorted_cats = cats[perm]
        texts = np.empty(len(uniq), dtype=object)
        for u in range(len(uniq)):  # one iteration per distinct set, not per record
            vals = sorted_cats[member[u]]
            texts[u] = str(vals[0]) if len(vals) == 1 else "{" + ",".join(vals) + "}"
        col = texts[inv.reshape(-1)]
        out[name] = col if rows is None else col[rows]
    return out


def to_arrow(reps: Generalized, domain: Domain,
             categories: Sequence[Sequence[str]] | None = None, *,
             labels: ArrayLike | None = None,
             suffixes: tuple[str, str] = ("_lo", "_hi")) -> dict[str, pa.Array]:
    """Structured published values for Parquet, one pyarrow array per column.

    Per ordered attribute ``<name>_lo`` and ``<name>_hi`` (float64); per unordered
    attribute ``<name>``, a ``list<string>`` of the set's category strings, sorted (by code
    when ``categories`` is None). With ``labels`` one entry per record, else one per class.
    Vectorized: offsets and value indices are computed in numpy from the bitsets, and
    the strings are gathered with a single ``take`` per attribute.
    """
    rows = None if labels is None else reps.rows_of(labels)
    out: dict[str, pa.Array] = {}
    assert domain.ordered_names is not None and domain.unordered_names is not None
    for i, name in enumerate(domain.ordered_names):
        for k, arr in enumerate((reps.lo[:, i], reps.hi[:, i])):
            out[name + suffixes[k]] = pa.array(arr if rows is None else arr[rows],
                                               type=pa.float64())
    for j, name in enumerate(domain.unordered_names):
        cats, perm = _category_table(domain, categories, j)
        member = _members(reps.bits[:, j, :], int(domain.card[j]))[:, perm]
        lens = member.sum(axis=1, dtype=np.int64)
        _, col_idx = np.nonzero(member)  # display positions, class by class
        if rows is not None:
            cls_start = np.zeros(len(reps), dtype=np.int64)
            np.cumsum(lens[:-1], out=cls_start[1:])
            lens = lens[rows]
            rec_start = np.cumsum(lens) - lens
            flat = np.repeat(cls_start[rows] - rec_start, lens) + np.arange(lens.sum())
            col_idx = col_idx[flat]
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        values = pa.array(cats[perm]).take(pa.array(col_idx))
        if offsets[-1] < 2**31:
            col = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
        else:
            col = pa.LargeListArray.from_arrays(pa.array(offsets), values)
        out[name] = col
    return out
