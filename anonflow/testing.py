"""Helpers for testing plugins: build typed tables and step contexts without a workflow.

::

    from anonflow.testing import make_context, typed_table

    t = typed_table({"age": [30, 31]}, quasi={"age": "continuous"})
    values = MyMetric().compute(t, t, {}, make_context())
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from .api import StepContext
from .schema import ROW, Attribute, Typing
from .store import Store
from .table import TypedTable


def typed_table(columns: Mapping[str, Any], *, quasi: Mapping[str, str] | None = None,
                sensitive: Mapping[str, str] | None = None, label: Mapping[str, str] | None = None,
                claims: dict | None = None, extra: Mapping[str, Any] | None = None) -> TypedTable:
    """A typed table from plain columns; ``quasi``/``sensitive``/``label`` map column -> type,
    ``extra`` adds untyped columns such as ``_class``."""
    n = len(next(iter(columns.values())))
    data = {ROW: pa.array(np.arange(n), pa.int64()), **{k: pa.array(v) for k, v in columns.items()}}
    for k, v in (extra or {}).items():
        data[k] = pa.array(v)
    roles = {}
    for role, spec in (("quasi", quasi), ("sensitive", sensitive), ("label", label)):
        for name, typ in (spec or {}).items():
            roles[name] = (role, typ)
    attrs = tuple(Attribute(c, *roles.get(c, ("insensitive", None))) for c in columns)
    return TypedTable(pa.table(data), Typing(attrs), claims or {})


def make_context(step: str = "test", seed: int = 0, store: Store | None = None,
                 output_dir: Path | None = None) -> StepContext:
    """A step context backed by an in-memory store (for ``ctx.sql``)."""
    store = store or Store(":memory:")
    out = output_dir or Path.cwd()
    return StepContext(step=step, seed=seed, rng=np.random.default_rng(seed), workflow_dir=out, output_dir=out,
                       sql=lambda query, params=None, **tables: store.sql(query, params, **tables),
                       derive=store.derive_table, discard=store.discard, relation=store.relation,
                       copy_to=store.copy_to)
