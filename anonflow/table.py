"""Typed tables and their canonical content hash.

A :class:`TypedTable` is an Arrow table plus its :class:`~anonflow.schema.Typing` and the
privacy models its producer claims. Algorithms read columns as numpy arrays through Arrow
(no row loops) and return a new typed table.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .schema import CLASS, ROW, Typing


@dataclass(frozen=True)
class Stored:
    """Where a table's records live in the store: read column by column, never all at once
    unless asked. Records come back in ``_row`` order (the store writes every table in that
    order, and DuckDB keeps insertion order)."""

    #: the DuckDB table (or view) holding the records, unquoted
    name: str
    columns: tuple[str, ...]
    rows: int
    #: ``fetch(columns)`` -> those columns (all of them for None) as an Arrow table, in ``_row`` order
    fetch: Callable[[Sequence[str] | None], pa.Table] = field(repr=False, compare=False)
    #: the table's content hash once it is a registered artifact (None for a scratch table)
    data_hash: str | None = None
    #: the columns' Arrow types
    schema: pa.Schema | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class ColumnDomain:
    """One column over the whole table a fragment was cut from (``TypedTable.domain``): the
    least and greatest value, mean and population standard deviation of a numeric column, or
    the sorted distinct values of a categorical one (missing values not counted)."""

    lo: float | None = None
    hi: float | None = None
    mean: float | None = None
    std: float | None = None
    values: pa.Array | None = field(default=None, compare=False)


class TypedTable:
    """A table with the typing of its columns, in memory (an Arrow table) or in the store.

    The records always hold the column ``_row`` (each record's 0-based position in its source),
    which keeps records aligned between an original and an anonymized table. Algorithm
    outputs also hold ``_class``, the class (group) id of each record.

    A table read from the store (``stored`` set) is not loaded: :meth:`column`,
    :meth:`select` and :meth:`numeric` read only the columns asked for, and SQL run through
    the step context reads the stored table itself. :attr:`data` loads every column (and keeps
    them); plugins that need only some columns should ask for those.
    """

    __slots__ = ("_data", "typing", "claims", "hierarchies", "stored", "domain")

    def __init__(self, data: pa.Table | None = None, typing: Typing | None = None,
                 claims: dict[str, dict[str, Any]] | None = None, hierarchies: dict[str, Any] | None = None,
                 *, stored: Stored | None = None) -> None:
        if data is None and stored is None:
            raise ValueError("a TypedTable needs its data or a stored table")
        self._data = data
        self.typing = typing if typing is not None else Typing()
        #: privacy models the producing algorithm guarantees, e.g. ``{"k-anonymity": {"k": 5}}``.
        self.claims = claims if claims is not None else {}
        #: generalization hierarchies by column (:class:`anonflow.hierarchy.Hierarchy`).
        self.hierarchies = hierarchies if hierarchies is not None else {}
        self.stored = stored if data is None else None
        #: for a fragment of a partitioned table: its quasi-identifiers over the whole table
        #: (:class:`ColumnDomain` by column), so that an algorithm scales distances and losses
        #: as on the whole table (:func:`anonflow_std.common.encode.encode`, z-scores); else empty
        self.domain: dict[str, ColumnDomain] = {}

    def __repr__(self) -> str:
        where = f"stored {self.stored.name}" if self.stored else "in memory"
        return f"TypedTable({self.num_rows} rows, {len(self.columns)} columns, {where})"

    @property
    def data(self) -> pa.Table:
        """Every column, in ``_row`` order (loaded from the store on first use)."""
        if self._data is None:
            assert self.stored is not None
            self._data = self.stored.fetch(None)
        return self._data

    @property
    def loaded(self) -> bool:
        return self._data is not None

    @property
    def num_rows(self) -> int:
        return self._data.num_rows if self._data is not None else self.stored.rows  # type: ignore[union-attr]

    @property
    def schema(self) -> pa.Schema:
        """The columns' names and Arrow types (nothing is read from the store)."""
        if self._data is not None:
            return self._data.schema
        if self.stored.schema is None:  # type: ignore[union-attr]
            self._data = self.stored.fetch(None)  # type: ignore[union-attr]
            return self._data.schema
        return self.stored.schema  # type: ignore[union-attr]

    @property
    def columns(self) -> list[str]:
        return self._data.column_names if self._data is not None else list(self.stored.columns)  # type: ignore

    def column(self, name: str) -> pa.ChunkedArray:
        """One column (read alone from the store when the table is not loaded)."""
        if self._data is not None:
            return self._data.column(name)
        if name not in self.stored.columns:  # type: ignore[union-attr]
            raise KeyError(f"no column {name!r}")
        return self.stored.fetch([name]).column(0)  # type: ignore[union-attr]

    def select(self, names: Iterable[str]) -> pa.Table:
        """The named columns as an Arrow table (only those are read from the store)."""
        names = list(names)
        if self._data is not None:
            return self._data.select(names)
        missing = [n for n in names if n not in self.stored.columns]  # type: ignore[union-attr]
        if missing:
            raise KeyError(f"no column {missing[0]!r}")
        return self.stored.fetch(names)  # type: ignore[union-attr]

    def numeric(self, columns: Iterable[str]) -> np.ndarray:
        """The named columns as one C-contiguous float64 array of shape (n, d)."""
        cols = list(columns)
        out = np.empty((self.num_rows, len(cols)), dtype=np.float64)
        for j, name in enumerate(cols):
            out[:, j] = self.column(name).to_numpy().astype(np.float64, copy=False)
        return out

    def rows(self) -> np.ndarray:
        return self.column(ROW).to_numpy()

    def classes(self) -> np.ndarray:
        return self.column(CLASS).to_numpy()

    def replace(self, data: pa.Table | None = None, typing: Typing | None = None,
                claims: dict | None = None, hierarchies: dict | None = None) -> "TypedTable":
        """A copy with some parts replaced; without new data it shares the records (in the
        store, if that is where they are)."""
        out = TypedTable(data if data is not None else self._data,
                         typing if typing is not None else self.typing,
                         claims if claims is not None else self.claims,
                         hierarchies if hierarchies is not None else self.hierarchies,
                         stored=None if data is not None else self.stored)
        out.domain = self.domain
        return out


def canonical(table: pa.Table) -> pa.Table:
    """The table in canonical row order: by ``_row`` if present, else by every column."""
    if table.num_rows == 0:
        return table
    keys = [ROW] if ROW in table.column_names else table.column_names
    return table.sort_by([(k, "ascending") for k in keys]).combine_chunks()


def _hash_type(t: pa.DataType) -> str:
    """The type as hashed: string and binary widths and dictionary encoding are storage
    details, so a table hashes alike in memory and after a round trip through DuckDB."""
    if pa.types.is_dictionary(t):
        return _hash_type(t.value_type)
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    return str(t)


def _column_bytes(arr: pa.Array) -> Iterable[bytes | memoryview]:
    """A column's content as a fixed sequence of byte parts; each part is the concatenation of
    one piece per record, so the parts of consecutive slices concatenate to the whole's."""
    t = arr.type
    if arr.null_count == 0:
        yield b"\x01" * len(arr)
        if (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
                or pa.types.is_large_binary(t)):
            # no nulls: lengths from the offsets, the value bytes straight from the buffer
            wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
            offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if wide else np.int32)[
                arr.offset: arr.offset + len(arr) + 1]
            yield np.diff(offsets).astype(np.int64).tobytes()
            data = arr.buffers()[2]
            if data is not None and len(offsets):
                yield memoryview(data)[int(offsets[0]): int(offsets[-1])]
            return
    else:
        yield np.asarray(pc.is_valid(arr).to_numpy(zero_copy_only=False), dtype=np.uint8).tobytes()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        arr = arr.cast(pa.large_binary())
        filled = pc.fill_null(arr, b"")
        lengths = pc.binary_length(filled).to_numpy(zero_copy_only=False).astype(np.int64)
        yield lengths.tobytes()
        for chunk in pa.chunked_array([filled]).chunks:
            # offsets may start anywhere for sliced arrays: take the value bytes explicitly
            offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int64)[chunk.offset: chunk.offset + len(chunk) + 1]
            data = chunk.buffers()[2]
            if data is not None and len(offsets):
                yield memoryview(data)[int(offsets[0]): int(offsets[-1])]
    elif pa.types.is_dictionary(t):
        yield from list(_column_bytes(arr.dictionary_decode()))[1:]
    elif pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t) \
            or pa.types.is_temporal(t) or pa.types.is_decimal(t):
        if pa.types.is_decimal(t):
            yield from list(_column_bytes(arr.cast(pa.string())))[1:]
            return
        values = pc.fill_null(arr, pa.scalar(0, type=t) if not pa.types.is_boolean(t) else False)
        np_values = values.to_numpy(zero_copy_only=False)
        if np_values.dtype.kind == "f":
            np_values = np.where(np_values == 0, 0.0, np_values)  # -0.0 and 0.0 hash alike
        yield np.ascontiguousarray(np_values).tobytes()
    else:
        # nested or exotic types: one JSON line per record is canonical enough and never ambiguous
        yield b"".join(json.dumps(v, sort_keys=True, default=str).encode() + b"\n" for v in arr.to_pylist())


class TableHasher:
    """SHA-256 of a table's schema and values, fed record batch by record batch in ``_row``
    order (bounded memory: the store hashes a table while reading it once).

    Each column's parts (validity, lengths, values) are hashed as separate streams, so the
    digest does not depend on how the records are cut into batches."""

    def __init__(self) -> None:
        self.rows = 0
        self.fields: list[tuple[str, str]] | None = None
        self.parts: list[list[Any]] = []

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        if self.fields is None:
            self.fields = [(f.name, _hash_type(f.type)) for f in batch.schema]
            self.parts = [[] for _ in self.fields]
        for i, col in enumerate(batch.columns):
            arrays = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
            for arr in arrays:
                for j, part in enumerate(_column_bytes(arr)):
                    if j == len(self.parts[i]):
                        self.parts[i].append(hashlib.sha256())
                    self.parts[i][j].update(part)
        self.rows += batch.num_rows

    def hexdigest(self, schema: pa.Schema | None = None) -> str:
        fields = self.fields if self.fields is not None else [(f.name, _hash_type(f.type)) for f in schema or []]
        h = hashlib.sha256()
        h.update(b"anonflow-table-v2\0")
        h.update(str(self.rows).encode() + b"\0")
        for i, (name, typ) in enumerate(fields):
            h.update(name.encode() + b"\0" + typ.encode() + b"\0")
            for part in (self.parts[i] if i < len(self.parts) else []):
                h.update(part.digest())
        return h.hexdigest()


def table_hash(table: pa.Table) -> str:
    """SHA-256 of the table's schema and values in canonical row order (hex); the same as
    the store's hash of the table once stored (:class:`TableHasher`)."""
    table = canonical(table)
    hasher = TableHasher()
    for batch in table.to_batches():
        hasher.update(batch)
    return hasher.hexdigest(table.schema)
