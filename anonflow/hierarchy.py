"""Generalization hierarchies (SPEC section 2).

A hierarchy maps each value of a column to one value per level 0..H: level 0 is the
original value (as text), level H is usually ``*``. It is held as an Arrow table with one
string column per level (``level0`` .. ``levelH``) and one row per original value, and is
validated against the data: every value present at level 0, and each level a function of
the level below. Generalizing a whole column to a level is one vectorized lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import InputError
from .table import table_hash


def value_keys(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Values as the text a hierarchy lists them by: integers (and integral floats) without a
    decimal point, everything else via Arrow's string cast."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    t = values.type
    if pa.types.is_floating(t):
        arr = values.to_numpy(zero_copy_only=False)
        finite = arr[~np.isnan(arr)] if arr.size else arr
        with np.errstate(invalid="ignore"):  # inf % 1 is nan: not integral
            integral = finite.size == 0 or bool(np.all(np.mod(finite, 1) == 0))
        if integral:
            # a value beyond int64 (1e23), or NaN, keeps its float text ("1e+23", "nan"): it is
            # then named as a value the hierarchy does not list, not a failed cast
            wide = pc.fill_null(pc.or_(pc.is_nan(values), pc.greater_equal(pc.abs(values), 2.0 ** 63)), False)
            if not pc.any(wide).as_py():
                return pc.cast(pc.cast(values, pa.int64()), pa.string())
            ints = pc.cast(pc.cast(pc.if_else(wide, 0.0, values), pa.int64()), pa.string())
            return pc.if_else(wide, pc.cast(values, pa.string()), ints)
    if pa.types.is_dictionary(t):
        values = values.dictionary_decode()
    return pc.cast(values, pa.string())


def encode(values: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """A column as (its distinct values in order of first appearance, each record's index
    into them, -1 for null): work per value is then done once per distinct value."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    enc = values if pa.types.is_dictionary(values.type) else pc.dictionary_encode(values)
    indices = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return enc.dictionary, indices


def lookup(per_value: np.ndarray, indices: np.ndarray, missing: int = -1) -> np.ndarray:
    """``per_value[indices]``, with ``missing`` where an index is -1 (a null)."""
    out = np.append(per_value.astype(np.int64, copy=False), np.int64(missing))
    return out[indices]


@dataclass(frozen=True)
class Hierarchy:
    """One column's hierarchy: ``table`` has string columns level0..levelH."""

    column: str
    table: pa.Table
    builder: str = ""

    @classmethod
    def from_levels(cls, column: str, levels: list[pa.Array] | list[list[str]], builder: str = "") -> "Hierarchy":
        arrays = [pc.cast(pa.array(lv) if not isinstance(lv, (pa.Array, pa.ChunkedArray)) else lv, pa.string())
                  for lv in levels]
        table = pa.table({f"level{i}": a for i, a in enumerate(arrays)})
        return cls(column, table.sort_by([("level0", "ascending")]).combine_chunks(), builder)

    @property
    def height(self) -> int:
        """The highest level H (a hierarchy with levels 0..H)."""
        return self.table.num_columns - 1

    @property
    def hash(self) -> str:
        return table_hash(self.table)

    def level(self, i: int) -> pa.Array:
        return self.table.column(f"level{i}").combine_chunks()

    def validate(self, where: str, origin: str = "") -> None:
        """Each level a function of the one below; level 0 has no duplicates."""
        label = f"hierarchy of {self.column!r}" + (f" ({origin})" if origin else "")
        if self.table.num_rows == 0:
            raise InputError(f"{label} is empty", where=where)
        nulls = [i for i in range(self.height + 1) if self.level(i).null_count]
        if nulls:
            raise InputError(f"{label} has an empty cell at level {nulls[0]}", where=where)
        for i in range(self.height):
            grouped = self.table.group_by(f"level{i}").aggregate([(f"level{i + 1}", "count_distinct")])
            counts = grouped.column(f"level{i + 1}_count_distinct").to_numpy()
            bad = np.flatnonzero(counts > 1)
            if bad.size:
                value = grouped.column(f"level{i}")[int(bad[0])].as_py()
                parents = pc.unique(pc.filter(self.level(i + 1), pc.equal(self.level(i), value))).to_pylist()
                what = "is listed twice with different generalizations" if i == 0 else "is not a function of the level below"
                raise InputError(f"{label} {what}: at level {i}, {value!r} maps to both {parents[0]!r} and "
                                 f"{parents[1]!r} at level {i + 1}", where=where)

    def check_covers(self, values: pa.Array | pa.ChunkedArray, where: str, origin: str = "") -> None:
        """Every (non-null) value of the data must be listed at level 0."""
        keys = pc.unique(pc.drop_null(value_keys(pc.unique(values))))
        missing = pc.filter(keys, pc.invert(pc.is_in(keys, value_set=self.level(0))))
        if len(missing):
            label = f"hierarchy of {self.column!r}" + (f" ({origin})" if origin else "")
            raise InputError(f"{label} has no row for the value {missing[0].as_py()!r} of the data "
                             f"({len(missing)} value(s) missing)", where=where)

    def generalize(self, values: pa.Array | pa.ChunkedArray, level: int) -> pa.Array:
        """Each value's ancestor at ``level`` (vectorized)."""
        if not 0 <= level <= self.height:
            raise ValueError(f"level {level} outside 0..{self.height}")
        codes = self.codes(values)
        return pc.take(self.level(level), pa.array(codes, mask=codes < 0))

    def codes(self, values: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Row index (into this hierarchy) of each value; -1 where absent (looked up once per
        distinct value)."""
        distinct, indices = encode(values)
        idx = pc.fill_null(pc.index_in(value_keys(distinct), value_set=self.level(0)), -1)
        return lookup(idx.to_numpy(zero_copy_only=False), indices)

    def leaves_under(self, level: int) -> np.ndarray:
        """For each hierarchy row, the number of level-0 values sharing its ancestor at ``level``."""
        inverse = self.level(level).dictionary_encode().indices.to_numpy(zero_copy_only=False)
        return np.bincount(inverse)[inverse]

    def describe(self) -> dict[str, Any]:
        return {"column": self.column, "builder": self.builder, "height": self.height,
                "values": self.table.num_rows,
                "distinct_per_level": [len(pc.unique(self.level(i))) for i in range(self.height + 1)]}
