"""Encode the typed columns of a table once, for the distance kernels (SPEC section 1).

:func:`encode` turns each attribute into flat numpy arrays by its type:

* **continuous** -- ``values`` (float64, original units), ``lo``/``hi`` (min/max) and
  ``scaled = (x - lo) / (hi - lo)`` (all 0 for a constant column);
* **ordinal** -- ``codes`` (int32 rank in the declared ``Attribute.order``), ``pos`` (the
  position of each category in [0, 1]: cumulative step weights ``W(j-1, j)`` divided by their
  total) and ``scaled = pos[codes]`` per record, so ``d(a, b) = |pos[a] - pos[b]|``;
* **nominal** -- ``codes`` (int32) into the sorted distinct values ``dictionary``;
* **semantic** -- ``codes`` (int32) into the sorted distinct code strings and a
  :class:`~anonflow_std.common.cht.CHT` built on them, with ``beta``/``w12`` from
  ``Attribute.options`` (defaults 1.0 and 0.0).

Categorical columns are dictionary-encoded once through Arrow (``dictionary_encode`` and a
sort of the dictionary), never by a Python loop over records; ``decode`` maps codes back.

Choices this module makes where SPEC leaves room:

* Scales and dictionaries belong to the encoded table: :meth:`Encoded.take` (a subset of
  records) keeps the parent's ``lo``/``hi``, category positions and CHT normalization
  (``Lmax``), so distances do not change meaning while an algorithm shrinks its working set.
* An ordinal attribute without a declared ``order`` takes its distinct values in sort order.
  Values are matched to ``order`` by their text (the typing step stores ``order`` as strings).
  A value missing from ``order``, a wrong number of weights or a non-positive weight is an
  :class:`~anonflow.errors.InputError`. Categories of ``order`` absent from the data still
  take their place in ``pos``.
* A semantic column that is not text (e.g. integer ``fnlwgt``) is cast to its decimal text;
  all codes must have one length (leading zeros of integers cannot be recovered: read such
  columns as text).
* Missing values (nulls, NaN) are an :class:`~anonflow.errors.InputError`: the typing step's
  ``missing`` policy must have removed or categorized them (SPEC section 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import ArrayLike, NDArray

from anonflow.api import ROW, Attribute, InputError, TypedTable
from .cht import CHT

__all__ = ["Continuous", "Ordinal", "Nominal", "Semantic", "EncodedAttribute", "Encoded", "encode",
           "ordinal_positions"]

FloatArray = NDArray[np.float64]
CodeArray = NDArray[np.int32]


@dataclass(frozen=True, eq=False)
class Continuous:
    """A continuous attribute (SPEC section 1): min-max scaled numbers."""

    name: str
    values: FloatArray
    scaled: FloatArray
    lo: float
    hi: float
    type: str = field(default="continuous", init=False)

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def take(self, idx: ArrayLike) -> "Continuous":
        return replace(self, values=self.values[idx], scaled=self.scaled[idx])

    def unscale(self, scaled: ArrayLike) -> FloatArray:
        """Scaled values back to original units."""
        return self.lo + np.asarray(scaled, dtype=np.float64) * (self.hi - self.lo)


@dataclass(frozen=True, eq=False)
class _Categorical:
    name: str
    codes: CodeArray
    #: the categories: code c means ``dictionary[c]``.
    dictionary: pa.Array

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    @property
    def m(self) -> int:
        """Number of categories."""
        return len(self.dictionary)

    @property
    def categories(self) -> list[Any]:
        return self.dictionary.to_pylist()

    def decode(self, codes: ArrayLike | None = None) -> pa.Array:
        """Codes (default: every record's) back to values, through Arrow."""
        c = self.codes if codes is None else np.asarray(codes)
        return self.dictionary.take(pa.array(c.astype(np.int64, copy=False)))

    def take(self, idx: ArrayLike):  # type: ignore[no-untyped-def]
        return replace(self, codes=self.codes[idx])


@dataclass(frozen=True, eq=False)
class Ordinal(_Categorical):
    """An ordinal attribute (SPEC section 1): ranks in the declared order and positions."""

    #: (m,) position of each category in [0, 1].
    pos: FloatArray = field(default_factory=lambda: np.zeros(0))
    #: (n,) ``pos[codes]``.
    scaled: FloatArray = field(default_factory=lambda: np.zeros(0))
    type: str = field(default="ordinal", init=False)

    def take(self, idx: ArrayLike) -> "Ordinal":
        return replace(self, codes=self.codes[idx], scaled=self.scaled[idx])


@dataclass(frozen=True, eq=False)
class Nominal(_Categorical):
    """A nominal attribute (SPEC section 1): codes into the sorted distinct values."""

    type: str = field(default="nominal", init=False)


@dataclass(frozen=True, eq=False)
class Semantic(_Categorical):
    """A semantic attribute (SPEC sections 1-2): codes into the sorted distinct code strings."""

    cht: CHT | None = None
    type: str = field(default="semantic", init=False)


EncodedAttribute = Continuous | Ordinal | Nominal | Semantic


@dataclass(frozen=True, eq=False)
class Encoded:
    """Encoded attributes of ``n`` records, in the order they were asked for."""

    attributes: tuple[EncodedAttribute, ...]
    n: int
    #: each record's ``_row`` (its position in the source), or 0..n-1.
    rows: NDArray[np.int64]

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.attributes]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, name: str) -> EncodedAttribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise KeyError(name)

    def take(self, idx: ArrayLike) -> "Encoded":
        """The records ``idx`` (an index array or boolean mask), keeping every scale,
        dictionary and CHT of this encoding."""
        idx = np.asarray(idx)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        return Encoded(tuple(a.take(idx) for a in self.attributes), int(idx.shape[0]), self.rows[idx])

    def decode(self, name: str, codes: ArrayLike | None = None) -> pa.Array:
        """Codes of categorical attribute ``name`` back to its values."""
        attr = self[name]
        if isinstance(attr, Continuous):
            raise TypeError(f"{name!r} is continuous: it has no codes")
        return attr.decode(codes)


def ordinal_positions(weights: Sequence[float]) -> FloatArray:
    """Category positions from step weights ``W(j-1, j)`` (SPEC section 1): 0, then the
    cumulative weights divided by their total (all 0 for a single category)."""
    w = np.asarray(weights, dtype=np.float64)
    cum = np.concatenate([[0.0], np.cumsum(w)])
    total = cum[-1]
    return cum / total if total > 0 else np.zeros_like(cum)


def _column(table: TypedTable, name: str) -> pa.Array:
    col = table.data.column(name)
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.null_count:
        raise InputError(f"column {name!r} has {arr.null_count} missing value(s); the typing step's 'missing' "
                         "policy must drop them or make them a category before encoding")
    return arr


def _sorted_codes(arr: pa.Array) -> tuple[CodeArray, pa.Array]:
    """Dictionary-encode through Arrow and renumber the dictionary in sort order."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    enc = pc.dictionary_encode(arr)
    dictionary = enc.dictionary
    order = pc.array_sort_indices(dictionary).to_numpy().astype(np.int64)
    rank = np.empty(order.shape[0], dtype=np.int32)
    rank[order] = np.arange(order.shape[0], dtype=np.int32)
    indices = enc.indices.to_numpy(zero_copy_only=False)
    return rank[indices], dictionary.take(pa.array(order))


def _domain_codes(table: TypedTable, name: str, arr: pa.Array) -> tuple[CodeArray, pa.Array] | None:
    """Codes into the sorted distinct values of the whole table this one is a fragment of
    (``TypedTable.domain``), or None when it is not a fragment."""
    dom = table.domain.get(name)
    if dom is None or dom.values is None:
        return None
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    values = dom.values.cast(arr.type) if dom.values.type != arr.type else dom.values
    found = pc.index_in(arr, value_set=values)
    if found.null_count:
        raise InputError(f"column {name!r}: a value of the fragment is not among the whole table's values")
    return found.to_numpy(zero_copy_only=False).astype(np.int32), values


def _continuous(table: TypedTable, attr: Attribute) -> Continuous:
    arr = _column(table, attr.name)
    if not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_decimal(arr.type)
            or pa.types.is_boolean(arr.type)):
        raise InputError(f"continuous column {attr.name!r} has type {arr.type}, which is not numeric")
    values = table.numeric([attr.name])[:, 0].copy()
    if values.size and not np.all(np.isfinite(values)):
        raise InputError(f"continuous column {attr.name!r} has NaN or infinite values")
    lo = float(values.min()) if values.size else 0.0
    hi = float(values.max()) if values.size else 0.0
    dom = table.domain.get(attr.name)
    if dom is not None and dom.lo is not None and dom.hi is not None:  # a fragment: the whole table's scale
        lo, hi = float(dom.lo), float(dom.hi)
    scaled = (values - lo) / (hi - lo) if hi > lo else np.zeros_like(values)
    return Continuous(attr.name, values, scaled, lo, hi)


def _ordinal(table: TypedTable, attr: Attribute) -> Ordinal:
    arr = _column(table, attr.name)
    codes, dictionary = _domain_codes(table, attr.name, arr) or _sorted_codes(arr)
    if attr.order is None:
        order_arr = dictionary
        rank_of = np.arange(len(dictionary), dtype=np.int32)
    else:
        order = [str(v) for v in attr.order]
        if len(set(order)) != len(order):
            raise InputError(f"ordinal column {attr.name!r}: its 'order' repeats a category")
        order_arr = pa.array(order, type=pa.string())
        text = dictionary.cast(pa.string()) if not pa.types.is_string(dictionary.type) else dictionary
        found = pc.index_in(text, value_set=order_arr)
        if found.null_count:
            bad = pc.filter(text, pc.is_null(found))[0].as_py()
            raise InputError(f"ordinal column {attr.name!r}: value {bad!r} is not in its 'order' ({', '.join(order)})")
        rank_of = found.to_numpy(zero_copy_only=False).astype(np.int32)
    m = len(order_arr)
    weights = attr.weights if attr.weights is not None else (1.0,) * max(m - 1, 0)
    if len(weights) != max(m - 1, 0):
        raise InputError(f"ordinal column {attr.name!r}: {m} categories need {m - 1} step weights, got {len(weights)}")
    if any(not (float(w) > 0) for w in weights):
        raise InputError(f"ordinal column {attr.name!r}: step weights must be positive, got {list(weights)}")
    pos = ordinal_positions(weights)
    ranks = rank_of[codes]
    return Ordinal(attr.name, ranks, order_arr, pos=pos, scaled=pos[ranks])


def _nominal(table: TypedTable, attr: Attribute) -> Nominal:
    arr = _column(table, attr.name)
    codes, dictionary = _domain_codes(table, attr.name, arr) or _sorted_codes(arr)
    return Nominal(attr.name, codes, dictionary)


def _semantic(table: TypedTable, attr: Attribute) -> Semantic:
    arr = _column(table, attr.name)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = arr.cast(pa.string())
    codes, dictionary = _domain_codes(table, attr.name, arr) or _sorted_codes(arr)
    options = getattr(attr, "options", {}) or {}
    beta = float(options.get("beta", 1.0))
    w12 = options.get("w12", 0.0)
    cht = CHT(dictionary, beta=beta, w12=None if w12 is None else float(w12))
    return Semantic(attr.name, codes, cht.codes, cht=cht)


_ENCODERS = {"continuous": _continuous, "ordinal": _ordinal, "nominal": _nominal, "semantic": _semantic}


def encode(table: TypedTable, columns: Sequence[str] | None = None) -> Encoded:
    """Encode ``columns`` (default: the quasi-identifiers in typing order) of ``table`` by
    their SPEC section 1 types."""
    names = list(table.typing.quasi if columns is None else columns)
    if not names:
        raise InputError("nothing to encode: the table has no quasi-identifiers")
    attrs = []
    for name in names:
        if name not in table.typing:
            raise InputError(f"column {name!r} has no typing")
        attr = table.typing.get(name)
        if attr.type not in _ENCODERS:
            raise InputError(f"column {name!r} has no attribute type (continuous, ordinal, nominal or semantic)")
        attrs.append(_ENCODERS[attr.type](table, attr))
    n = table.num_rows
    rows = (table.data.column(ROW).to_numpy().astype(np.int64, copy=False) if ROW in table.columns
            else np.arange(n, dtype=np.int64))
    return Encoded(tuple(attrs), n, rows)
