"""Record distances, class centroids and information loss (SPEC section 1; section 4
Def. 8 and 10), vectorized over records and classes.

Per-attribute distances, each in [0, 1] (SPEC section 1):

* continuous: ``|a' - b'|`` on min-max scaled values;
* ordinal: ``|pos[a] - pos[b]|`` (step weights between a and b over all step weights);
* nominal: ``0`` if equal else ``1``;
* semantic: the normalized CHT distance (SPEC section 2, :mod:`anonflow_std.common.cht`).

The record distance is their sum over the encoded attributes, optionally weighted (Def. 8).

Class centroids (SPEC section 1), per attribute:

* continuous: the mean of the scaled values (published: the mean in original units);
* ordinal: the convex median -- the lowest rank whose cumulative frequency reaches 1/2
  (published: that category); it minimizes the total ordinal distance to the members for any
  step weights;
* nominal: the frequency vector ``f`` of the class; the distance of a record with value ``a``
  to it is ``||sqrt(.5) onehot(a) - sqrt(.5) f||^2 = 0.5 * (1 - 2 f_a + sum_c f_c^2)``
  (published: the mode, ties to the smallest value in sort order);
* semantic: the medoid -- the member value with the least total CHT distance to the members'
  values, ties to the smallest code (published: that code).

Choices this module makes where SPEC leaves room:

* The distance of a record to a **singleton** class's centroid equals the record-to-record
  distance for every type; for nominal, ``0.5 * (1 - 2[a == b] + 1) = 1 - [a == b]``, exactly
  the 0/1 distance. For larger classes the nominal frequency distance is *not* 0 for members:
  a class {x, y} gives its member x the distance ``0.5 * (1 - 1 + 0.5) = 0.25``. It lies in
  [0, 1] always. Summed over a class it has the closed form
  ``IL_nominal(G) = 0.5 * |G| * (1 - sum_c f_c^2)`` (half the class size times its Gini impurity).
* Class labels are integers ``0..g-1``; a negative label means "in no class" (excluded from
  every centroid, NaN in :func:`own_centroid_distances`). An empty class has a NaN mean, rank
  / mode / medoid -1 and zero frequencies; every distance to it is NaN and its published
  values are null.
* Nominal frequencies of all classes are kept as a dense ``(g, m)`` matrix when ``g * m`` is
  at most :data:`DENSE_LIMIT` entries, otherwise as sorted (class, code) keys with counts; the
  two give identical results.
* Centroid numbers depend only on the classes' members, not on their order; every operation
  here is a fixed number of numpy passes (no Python loop over records or classes; the CHT
  medoid loops over the ``L`` code levels).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import ArrayLike, NDArray

from .encode import Continuous, Encoded, EncodedAttribute, Nominal, Ordinal, Semantic

__all__ = [
    "DENSE_LIMIT", "Weights", "MeanPart", "MedianPart", "FrequencyPart", "MedoidPart", "Centroids",
    "attribute_distances", "record_distances", "pair_distances",
    "centroids", "centroid", "attribute_centroid_distances", "centroid_distances",
    "distances_to_centroids", "own_centroid_distances", "class_il", "il_by_class",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Weights = Mapping[str, float] | Sequence[float] | None

#: Largest ``g * m`` for which nominal class frequencies are stored densely.
DENSE_LIMIT = 1 << 22


# -- helpers ---------------------------------------------------------------------------


def _weights(enc: Encoded, weights: Weights) -> list[float]:
    """Per-attribute weights of Def. 8, aligned with ``enc.attributes`` (default all 1)."""
    if weights is None:
        return [1.0] * len(enc.attributes)
    if isinstance(weights, Mapping):
        unknown = set(weights) - set(enc.names)
        if unknown:
            raise KeyError(f"weights for attributes that are not encoded: {sorted(unknown)}")
        return [float(weights.get(a.name, 1.0)) for a in enc.attributes]
    w = [float(x) for x in weights]
    if len(w) != len(enc.attributes):
        raise ValueError(f"{len(w)} weights for {len(enc.attributes)} attributes")
    return w


def _sel(rows: ArrayLike | None) -> Any:
    return slice(None) if rows is None else np.asarray(rows)


def _accumulate(total: FloatArray | None, d: FloatArray, w: float) -> FloatArray:
    if total is None:
        return d * w if w != 1.0 else d.astype(np.float64, copy=True)
    if w == 1.0:
        total += d
    else:
        total += w * d
    return total


# -- record to record ------------------------------------------------------------------


def attribute_distances(attr: EncodedAttribute, i: int, rows: ArrayLike | None = None) -> FloatArray:
    """Distance of record ``i`` to every record (or to ``rows``) on one attribute, in [0, 1]
    (SPEC section 1)."""
    s = _sel(rows)
    if isinstance(attr, Continuous):
        return np.abs(attr.scaled[s] - attr.scaled[i])
    if isinstance(attr, Ordinal):
        return np.abs(attr.pos - attr.scaled[i])[attr.codes[s]]
    if isinstance(attr, Nominal):
        return (attr.codes[s] != attr.codes[i]).astype(np.float64)
    if isinstance(attr, Semantic):
        assert attr.cht is not None
        return attr.cht.distance_to(int(attr.codes[i]))[attr.codes[s]]
    raise TypeError(f"unknown encoded attribute {attr!r}")


def record_distances(enc: Encoded, i: int, weights: Weights = None, rows: ArrayLike | None = None) -> FloatArray:
    """``dis(t_i, t)`` for every record ``t`` (or ``rows``): the (weighted) sum of the
    per-attribute distances (SPEC section 4, Def. 8)."""
    total: FloatArray | None = None
    s = _sel(rows)
    for attr, w in zip(enc.attributes, _weights(enc, weights)):
        if w == 0.0:
            continue
        if isinstance(attr, Nominal):  # skip the float temporary
            ne = attr.codes[s] != attr.codes[i]
            if total is None:
                total = ne.astype(np.float64) * w
            elif w == 1.0:
                total += ne
            else:
                total += w * ne
            continue
        total = _accumulate(total, attribute_distances(attr, i, rows), w)
    if total is None:
        total = np.zeros(enc.n if rows is None else np.asarray(rows).shape[0])
    return total


def pair_distances(enc: Encoded, a: ArrayLike, b: ArrayLike, weights: Weights = None) -> FloatArray:
    """Elementwise ``dis(t_a[k], t_b[k])`` for two aligned index arrays (Def. 8)."""
    a = np.asarray(a, dtype=np.intp)
    b = np.asarray(b, dtype=np.intp)
    total = np.zeros(np.broadcast(a, b).shape)
    for attr, w in zip(enc.attributes, _weights(enc, weights)):
        if isinstance(attr, (Continuous, Ordinal)):
            d = np.abs(attr.scaled[a] - attr.scaled[b])
        elif isinstance(attr, Nominal):
            d = (attr.codes[a] != attr.codes[b]).astype(np.float64)
        else:
            assert attr.cht is not None
            d = attr.cht.pairwise(attr.codes[a], attr.codes[b])
        total += w * d
    return total


# -- centroids -------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MeanPart:
    """Continuous centroid of every class: mean of the scaled values, and in original units."""

    scaled: FloatArray
    mean: FloatArray


@dataclass(frozen=True, eq=False)
class MedianPart:
    """Ordinal centroid of every class: the convex median rank and its position."""

    rank: IntArray
    pos: FloatArray


@dataclass(frozen=True, eq=False)
class FrequencyPart:
    """Nominal centroid of every class: the frequency vector (dense ``(g, m)`` or sparse
    sorted keys ``class * m + code`` with counts), ``sum_c f_c^2`` and the mode."""

    m: int
    sizes: IntArray
    sumsq: FloatArray
    mode: IntArray
    dense: FloatArray | None = None
    keys: IntArray | None = None
    counts: FloatArray | None = None

    def lookup(self, classes: ArrayLike, codes: ArrayLike) -> FloatArray:
        """Elementwise frequency ``f[classes[k], codes[k]]``."""
        cl = np.asarray(classes, dtype=np.int64)
        co = np.asarray(codes, dtype=np.int64)
        if self.dense is not None:
            return self.dense[cl, co]
        assert self.keys is not None and self.counts is not None
        want = cl * self.m + co
        at = np.searchsorted(self.keys, want)
        at_c = np.minimum(at, self.keys.shape[0] - 1)
        hit = self.keys[at_c] == want
        size = self.sizes[cl].astype(np.float64)
        return np.where(hit, self.counts[at_c] / np.where(size > 0, size, 1.0), 0.0)

    def row(self, j: int) -> FloatArray:
        """The ``(m,)`` frequency vector of class ``j``."""
        if self.dense is not None:
            return self.dense[j]
        assert self.keys is not None and self.counts is not None
        lo, hi = np.searchsorted(self.keys, [j * self.m, (j + 1) * self.m])
        out = np.zeros(self.m)
        if self.sizes[j] > 0:
            out[self.keys[lo:hi] - j * self.m] = self.counts[lo:hi] / self.sizes[j]
        return out


@dataclass(frozen=True, eq=False)
class MedoidPart:
    """Semantic centroid of every class: the medoid's code."""

    code: IntArray


CentroidPart = MeanPart | MedianPart | FrequencyPart | MedoidPart


@dataclass(frozen=True, eq=False)
class Centroids:
    """Centroids of ``g`` classes, one part per encoded attribute (SPEC section 1)."""

    attributes: tuple[EncodedAttribute, ...]
    parts: tuple[CentroidPart, ...]
    sizes: IntArray

    @property
    def g(self) -> int:
        return int(self.sizes.shape[0])

    def __len__(self) -> int:
        return self.g

    def part(self, name: str) -> CentroidPart:
        for a, p in zip(self.attributes, self.parts):
            if a.name == name:
                return p
        raise KeyError(name)

    def published(self) -> dict[str, pa.Array]:
        """Publishable centroid value of every class per attribute (SPEC section 1): mean
        (original units), median category, mode, medoid code; null for empty classes."""
        out: dict[str, pa.Array] = {}
        for attr, part in zip(self.attributes, self.parts):
            if isinstance(part, MeanPart):
                out[attr.name] = pa.array(part.mean, type=pa.float64())
                continue
            if isinstance(part, MedianPart):
                idx = part.rank
            elif isinstance(part, FrequencyPart):
                idx = part.mode
            else:
                idx = part.code
            assert not isinstance(attr, Continuous)
            out[attr.name] = attr.dictionary.take(pa.array(idx.astype(np.int64), mask=idx < 0))
        return out

    def values(self, j: int = 0) -> dict[str, Any]:
        """The publishable centroid of class ``j`` as Python values."""
        return {name: arr[j].as_py() for name, arr in self.published().items()}


def _class_counts(codes: NDArray[Any], lab: IntArray, g: int, m: int) -> FloatArray:
    return np.bincount(lab * m + codes, minlength=g * m).reshape(g, m).astype(np.float64)


def _frequency_part(codes: NDArray[Any], lab: IntArray, g: int, m: int, sizes: IntArray) -> FrequencyPart:
    safe = np.where(sizes > 0, sizes, 1).astype(np.float64)
    if g * m <= DENSE_LIMIT:
        cnt = _class_counts(codes, lab, g, m)
        mode = np.argmax(cnt, axis=1).astype(np.int64)  # first maximum = smallest value in sort order
        mode[sizes == 0] = -1
        freq = cnt / safe[:, None]
        return FrequencyPart(m, sizes, np.einsum("ij,ij->i", freq, freq), mode, dense=freq)
    keys, counts = np.unique(lab * m + codes.astype(np.int64), return_counts=True)
    counts = counts.astype(np.float64)
    cls = keys // m
    sumsq = np.bincount(cls, weights=counts * counts, minlength=g) / (safe * safe)
    mode = np.full(g, -1, dtype=np.int64)
    if keys.size:
        starts = np.flatnonzero(np.r_[True, cls[1:] != cls[:-1]])
        best = np.maximum.reduceat(counts, starts)
        is_best = counts == np.repeat(best, np.diff(np.r_[starts, keys.size]))
        first = np.minimum.reduceat(np.where(is_best, np.arange(keys.size), keys.size), starts)
        mode[cls[starts]] = keys[first] % m
    return FrequencyPart(m, sizes, sumsq, mode, keys=keys, counts=counts)


def _convex_median(codes: NDArray[Any], lab: IntArray, g: int, m: int, sizes: IntArray) -> IntArray:
    """Lowest rank whose cumulative count reaches half the class (exact integer test)."""
    cum = np.cumsum(np.bincount(lab * m + codes, minlength=g * m).reshape(g, m), axis=1)
    rank = np.argmax(2 * cum >= sizes[:, None], axis=1).astype(np.int64)
    rank[sizes == 0] = -1
    return rank


def centroids(enc: Encoded, labels: ArrayLike, groups: int | None = None) -> Centroids:
    """Centroids of all classes at once: record ``t`` is in class ``labels[t]`` (``0..g-1``;
    negative = in no class). ``groups`` defaults to ``max(labels) + 1``."""
    lab_all = np.asarray(labels, dtype=np.int64).ravel()
    if lab_all.shape[0] != enc.n:
        raise ValueError(f"{lab_all.shape[0]} labels for {enc.n} records")
    member = lab_all >= 0
    all_members = bool(member.all())
    lab = lab_all if all_members else lab_all[member]
    g = (int(lab.max()) + 1 if lab.size else 0) if groups is None else int(groups)
    if lab.size and lab.max() >= g:
        raise ValueError(f"label {int(lab.max())} out of range for {g} classes")
    sizes = np.bincount(lab, minlength=g).astype(np.int64)
    safe = np.where(sizes > 0, sizes, 1).astype(np.float64)
    empty = sizes == 0
    parts: list[CentroidPart] = []
    for attr in enc.attributes:
        if isinstance(attr, Continuous):
            sc = attr.scaled if all_members else attr.scaled[member]
            vals = attr.values if all_members else attr.values[member]
            mean_s = np.bincount(lab, weights=sc, minlength=g) / safe
            mean_v = np.bincount(lab, weights=vals, minlength=g) / safe
            mean_s[empty] = np.nan
            mean_v[empty] = np.nan
            parts.append(MeanPart(mean_s, mean_v))
            continue
        codes = attr.codes if all_members else attr.codes[member]
        if isinstance(attr, Ordinal):
            rank = _convex_median(codes, lab, g, attr.m, sizes)
            pos = np.where(rank >= 0, attr.pos[np.maximum(rank, 0)], np.nan)
            parts.append(MedianPart(rank, pos))
        elif isinstance(attr, Nominal):
            parts.append(_frequency_part(codes, lab, g, attr.m, sizes))
        else:
            assert isinstance(attr, Semantic) and attr.cht is not None
            parts.append(MedoidPart(attr.cht.medoids(codes, lab, g)))
    return Centroids(enc.attributes, tuple(parts), sizes)


def centroid(enc: Encoded, members: ArrayLike) -> Centroids:
    """The centroid of one class (``g = 1``) given its member record indices (or a mask)."""
    idx = np.asarray(members)
    if idx.dtype == bool:
        idx = np.flatnonzero(idx)
    if idx.size == 0:
        raise ValueError("the centroid of an empty class is undefined")
    sub = enc.take(idx)
    return centroids(sub, np.zeros(sub.n, dtype=np.int64), 1)


# -- distances to centroids ------------------------------------------------------------


def attribute_centroid_distances(attr: EncodedAttribute, part: CentroidPart, j: int = 0,
                                 rows: ArrayLike | None = None) -> FloatArray:
    """Distance of every record (or ``rows``) to the centroid of class ``j`` on one attribute."""
    s = _sel(rows)
    if isinstance(part, MeanPart):
        return np.abs(attr.scaled[s] - part.scaled[j])  # type: ignore[union-attr]
    # categorical types: a table over the m categories, then one gather over the records
    if isinstance(part, MedianPart):
        return np.abs(attr.pos - part.pos[j])[attr.codes[s]]  # type: ignore[union-attr]
    if isinstance(part, FrequencyPart):
        # 0.5 * (1 - 2 f_a + sum_c f_c^2) = 0.5 * (1 + sum_c f_c^2) - f_a
        return (0.5 * (1.0 + part.sumsq[j]) - part.row(j))[attr.codes[s]]  # type: ignore[union-attr]
    assert isinstance(attr, Semantic) and attr.cht is not None
    return attr.cht.distance_to(int(part.code[j]))[attr.codes[s]]


def centroid_distances(enc: Encoded, cents: Centroids, j: int = 0, weights: Weights = None,
                       rows: ArrayLike | None = None) -> FloatArray:
    """``dis(t, c_j)`` for every record ``t`` (or ``rows``) and the centroid of class ``j``
    (all NaN if class ``j`` is empty)."""
    if cents.sizes[j] == 0:
        return np.full(enc.n if rows is None else np.asarray(rows).shape[0], np.nan)
    total: FloatArray | None = None
    for attr, part, w in zip(enc.attributes, cents.parts, _weights(enc, weights)):
        if w != 0.0:
            total = _accumulate(total, attribute_centroid_distances(attr, part, j, rows), w)
    if total is None:
        total = np.zeros(enc.n if rows is None else np.asarray(rows).shape[0])
    return total


def distances_to_centroids(enc: Encoded, i: int, cents: Centroids, weights: Weights = None,
                           classes: ArrayLike | None = None) -> FloatArray:
    """``dis(t_i, c_G)`` for every class ``G`` (or the listed ``classes``): shape ``(g,)``
    (NaN for empty classes)."""
    cl = np.arange(cents.g) if classes is None else np.asarray(classes, dtype=np.int64)
    empty = cents.sizes[cl] == 0
    total = np.zeros(cl.shape[0])
    for attr, part, w in zip(enc.attributes, cents.parts, _weights(enc, weights)):
        if w == 0.0:
            continue
        if isinstance(part, MeanPart):
            d = np.abs(part.scaled[cl] - attr.scaled[i])  # type: ignore[union-attr]
        elif isinstance(part, MedianPart):
            d = np.abs(part.pos[cl] - attr.scaled[i])  # type: ignore[union-attr]
        elif isinstance(part, FrequencyPart):
            a = np.full(cl.shape[0], attr.codes[i])  # type: ignore[union-attr]
            d = 0.5 * ((1.0 + part.sumsq[cl]) - 2.0 * part.lookup(cl, a))
        else:
            assert isinstance(attr, Semantic) and attr.cht is not None
            d = attr.cht.pairwise(int(attr.codes[i]), np.maximum(part.code[cl], 0))
        total += w * d
    if empty.any():
        total[empty] = np.nan
    return total


def own_centroid_distances(enc: Encoded, labels: ArrayLike, cents: Centroids,
                           weights: Weights = None) -> FloatArray:
    """``dis(t, c_{labels[t]})`` for every record (NaN where ``labels[t] < 0``)."""
    lab = np.asarray(labels, dtype=np.int64).ravel()
    if lab.shape[0] != enc.n:
        raise ValueError(f"{lab.shape[0]} labels for {enc.n} records")
    member = lab >= 0
    cl = np.where(member, lab, 0)
    total = np.zeros(enc.n)
    for attr, part, w in zip(enc.attributes, cents.parts, _weights(enc, weights)):
        if w == 0.0:
            continue
        if isinstance(part, MeanPart):
            d = np.abs(attr.scaled - part.scaled[cl])  # type: ignore[union-attr]
        elif isinstance(part, MedianPart):
            d = np.abs(attr.scaled - part.pos[cl])  # type: ignore[union-attr]
        elif isinstance(part, FrequencyPart):
            d = 0.5 * ((1.0 + part.sumsq[cl]) - 2.0 * part.lookup(cl, attr.codes))  # type: ignore[union-attr]
        else:
            assert isinstance(attr, Semantic) and attr.cht is not None
            d = attr.cht.pairwise(attr.codes, part.code[cl])
        total += w * d
    if not member.all():
        total[~member] = np.nan
    return total


# -- information loss ------------------------------------------------------------------


def class_il(enc: Encoded, members: ArrayLike, weights: Weights = None) -> float:
    """``IL(G) = sum_{t in G} dis(t, c)`` of one class given its member indices (SPEC
    section 4, Def. 10)."""
    idx = np.asarray(members)
    if idx.dtype == bool:
        idx = np.flatnonzero(idx)
    sub = enc.take(idx)
    lab = np.zeros(sub.n, dtype=np.int64)
    cents = centroids(sub, lab, 1)
    return float(own_centroid_distances(sub, lab, cents, weights).sum())


def il_by_class(enc: Encoded, labels: ArrayLike, groups: int | None = None, weights: Weights = None,
                cents: Centroids | None = None) -> FloatArray:
    """``IL(G)`` of every class (Def. 10), shape ``(g,)``; pass ``cents`` to reuse centroids."""
    lab = np.asarray(labels, dtype=np.int64).ravel()
    if cents is None:
        cents = centroids(enc, lab, groups)
    d = own_centroid_distances(enc, lab, cents, weights)
    member = lab >= 0
    return np.bincount(lab[member], weights=d[member], minlength=cents.g)
