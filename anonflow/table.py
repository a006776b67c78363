"""Typed tables and their canonical content hash.

A :class:`TypedTable` is an Arrow table plus its :class:`~anonflow.schema.Typing` and the
privacy models its producer claims. Algorithms read columns as numpy arrays through Arrow
(no row loops) and return a new typed table.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .schema import CLASS, ROW, Typing


@dataclass(frozen=True)
class TypedTable:
    """An Arrow table with the typing of its columns.

    ``data`` always holds the column ``_row`` (each record's 0-based position in its source),
    which keeps records aligned between an original and an anonymized table. Algorithm
    outputs also hold ``_class``, the class (group) id of each record.
    """

    data: pa.Table
    typing: Typing
    #: privacy models the producing algorithm guarantees, e.g. ``{"k-anonymity": {"k": 5}}``.
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: generalization hierarchies by column (:class:`anonflow.hierarchy.Hierarchy`).
    hierarchies: dict[str, Any] = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return self.data.num_rows

    @property
    def columns(self) -> list[str]:
        return self.data.column_names

    def numeric(self, columns: Iterable[str]) -> np.ndarray:
        """The named columns as one C-contiguous float64 array of shape (n, d)."""
        cols = list(columns)
        out = np.empty((self.num_rows, len(cols)), dtype=np.float64)
        for j, name in enumerate(cols):
            out[:, j] = self.data.column(name).to_numpy().astype(np.float64, copy=False)
        return out

    def rows(self) -> np.ndarray:
        return self.data.column(ROW).to_numpy()

    def classes(self) -> np.ndarray:
        return self.data.column(CLASS).to_numpy()

    def replace(self, data: pa.Table | None = None, typing: Typing | None = None,
                claims: dict | None = None, hierarchies: dict | None = None) -> "TypedTable":
        return TypedTable(data if data is not None else self.data,
                          typing if typing is not None else self.typing,
                          claims if claims is not None else self.claims,
                          hierarchies if hierarchies is not None else self.hierarchies)


def canonical(table: pa.Table) -> pa.Table:
    """The table in canonical row order: by ``_row`` if present, else by every column."""
    if table.num_rows == 0:
        return table
    keys = [ROW] if ROW in table.column_names else table.column_names
    return table.sort_by([(k, "ascending") for k in keys]).combine_chunks()


def _column_bytes(arr: pa.Array) -> Iterable[bytes]:
    valid = np.asarray(pc.is_valid(arr).to_numpy(zero_copy_only=False), dtype=np.uint8)
    yield valid.tobytes()
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t) or pa.types.is_string_view(t):
        arr = arr.cast(pa.large_binary())
        filled = pc.fill_null(arr, b"")
        lengths = pc.binary_length(filled).to_numpy(zero_copy_only=False).astype(np.int64)
        yield lengths.tobytes()
        for chunk in pa.chunked_array([filled]).chunks:
            # offsets may start anywhere for sliced arrays: take the value bytes explicitly
            offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int64)[chunk.offset: chunk.offset + len(chunk) + 1]
            data = chunk.buffers()[2]
            if data is not None and len(offsets):
                yield data.to_pybytes()[int(offsets[0]): int(offsets[-1])]
    elif pa.types.is_dictionary(t):
        yield from _column_bytes(arr.dictionary_decode())
    elif pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t) \
            or pa.types.is_temporal(t) or pa.types.is_decimal(t):
        if pa.types.is_decimal(t):
            arr = arr.cast(pa.string())
            yield from _column_bytes(arr)
            return
        values = pc.fill_null(arr, pa.scalar(0, type=t) if not pa.types.is_boolean(t) else False)
        np_values = values.to_numpy(zero_copy_only=False)
        if np_values.dtype.kind == "f":
            np_values = np.where(np_values == 0, 0.0, np_values)  # -0.0 and 0.0 hash alike
        yield np.ascontiguousarray(np_values).tobytes()
    else:
        # nested or exotic types: a JSON rendering is canonical enough and never ambiguous
        yield json.dumps(arr.to_pylist(), sort_keys=True, default=str).encode()


def table_hash(table: pa.Table) -> str:
    """SHA-256 of the table's schema and values in canonical row order (hex)."""
    table = canonical(table)
    h = hashlib.sha256()
    h.update(b"anonflow-table-v1\0")
    h.update(str(table.num_rows).encode() + b"\0")
    for name in table.column_names:
        col = table.column(name)
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        h.update(name.encode() + b"\0" + str(arr.type).encode() + b"\0")
        for part in _column_bytes(arr):
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
    return h.hexdigest()
