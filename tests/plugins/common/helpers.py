"""Builders of small typed tables for the kernel tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.schema import ROW, Attribute, Typing
from anonflow.table import TypedTable

from tests.support import data

ADULT = Path(__file__).resolve().parents[3] / "workflows" / "data" / "adult" / "adult_full.csv"


def table(columns: Mapping[str, list[Any]], types: Mapping[str, str], *,
          orders: Mapping[str, tuple[str, ...]] | None = None,
          weights: Mapping[str, tuple[float, ...]] | None = None,
          options: Mapping[str, dict[str, Any]] | None = None) -> TypedTable:
    """A typed table whose columns in ``types`` are quasi-identifiers of those types."""
    n = len(next(iter(columns.values())))
    data = {ROW: pa.array(np.arange(n), pa.int64()), **{k: pa.array(v) for k, v in columns.items()}}
    attrs = []
    for c in columns:
        if c in types:
            attrs.append(Attribute(c, "quasi", types[c], order=(orders or {}).get(c),
                                   weights=(weights or {}).get(c), options=dict((options or {}).get(c, {}))))
        else:
            attrs.append(Attribute(c, "insensitive"))
    return TypedTable(pa.table(data), Typing(tuple(attrs)))


ADULT_QI = {"age": "continuous", "sex": "nominal", "race": "nominal", "education": "nominal",
            "native-country": "nominal", "workclass": "nominal", "fnlwgt": "semantic"}


def adult(six_digit_fnlwgt: bool = True, types: Mapping[str, str] = ADULT_QI,
          orders: Mapping[str, tuple[str, ...]] | None = None) -> TypedTable:
    """Adult (45,222 records) with fnlwgt read as text; by default only records whose fnlwgt
    has exactly 6 digits (SPEC section 4)."""
    t = data.adult_full(fnlwgt_as_text=True)
    if six_digit_fnlwgt:
        t = t.filter(pc.equal(pc.utf8_length(t["fnlwgt"]), 6))
    t = t.add_column(0, ROW, pa.array(np.arange(t.num_rows), pa.int64()))
    attrs = tuple(Attribute(c, "quasi", types[c], order=(orders or {}).get(c)) if c in types
                  else Attribute(c, "insensitive") for c in t.column_names if c != ROW)
    return TypedTable(t, Typing(attrs))
