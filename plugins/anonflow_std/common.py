"""Helpers shared by the first-party plugins."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import InputError, TypedTable


def continuous_quasi(table: TypedTable, plugin: str) -> list[str]:
    """The quasi-identifiers, all of which must be continuous for a numeric-only method."""
    quasi = table.typing.quasi
    if not quasi:
        raise InputError(f"{plugin} needs at least one quasi-identifier; name them under 'quasi' in the typing step")
    for name in quasi:
        attr = table.typing.get(name)
        if attr.type != "continuous":
            raise InputError(f"{plugin} works on numbers only, but quasi-identifier {name!r} is typed {attr.type}; "
                             f"type it continuous in the typing step (quasi: {{{name}: continuous}}) if its "
                             "values are numbers, or leave it out of the quasi-identifiers")
    return quasi


def zscores(X: np.ndarray, names: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Standardize columns (population std); constant columns become 0 and are reported."""
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    constant = [n for n, s in zip(names, std) if s == 0]
    safe = np.where(std == 0, 1.0, std)
    return (X - mean) / safe, constant


def sensitive_attribute(table: TypedTable, plugin: str, given: str | None = None) -> str:
    """The one sensitive attribute (or ``given``), with a clear error otherwise."""
    if given is not None:
        if given not in table.columns:
            raise InputError(f"{plugin}: sensitive column {given!r} is not in the table")
        return given
    sens = table.typing.sensitive
    if not sens:
        raise InputError(f"{plugin} needs a sensitive attribute; name one under 'sensitive' in the typing step")
    if len(sens) > 1:
        raise InputError(f"{plugin} needs exactly one sensitive attribute, but the typing names {len(sens)}: "
                         f"{', '.join(sens)}; keep one under 'sensitive'")
    return sens[0]


def sensitive_codes(table: TypedTable, column: str, plugin: str) -> np.ndarray:
    """Codes of the sensitive values (in sort order of the values)."""
    col = table.data.column(column)
    if col.null_count:
        raise InputError(f"{plugin}: sensitive column {column!r} has {col.null_count} missing value(s); the typing "
                         "step's 'missing' policy must drop them or make them a category")
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    enc = pc.dictionary_encode(arr)
    order = pc.array_sort_indices(enc.dictionary).to_numpy().astype(np.int64)
    rank = np.empty(order.shape[0], dtype=np.int64)
    rank[order] = np.arange(order.shape[0])
    return rank[enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)]
