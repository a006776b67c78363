"""What the privacy checks of ARX and pycanon share (``entropy-l-diversity``,
``recursive-cl-diversity``, ``t-closeness``, ``average-risk``, ``highest-risk``): the
``by`` and ``sensitive`` parameters, the published classes as DuckDB numbers them, the real
sensitive values per class of a lattice partition, and the slack on floating-point
comparisons. No plugin is registered here."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, InputError, Param, Partition, StepContext, TypedTable, value_keys
from anonflow_std.common.columns import EPS, real_counts
from anonflow_std.common.counts import SENSITIVE

__all__ = ["BY", "EPS", "SENSITIVE", "published_classes", "real_matrix"]

#: ``by`` of these checks: unlike the older checks' (:data:`counts.BY`, ``_class`` when
#: present), the default is the published QI values, what an attacker sees. ``EPS`` (the
#: slack on floating-point comparisons, the same in SQL and in ``partition_holds``) and
#: ``SENSITIVE`` are the package's.
BY = Param("by", "str", default=None, nullable=True, choices=("values", "class"),
           help="classes: records sharing the published QI values (default: what an attacker sees), or sharing _class")


def published_classes(table: TypedTable, params: Mapping[str, Any], plugin: str, ctx: StepContext,
                      sensitive: str | None = None) -> pa.Table:
    """The published records (a null ``_class`` is suppressed: left out) as an Arrow table
    ``(cls BIGINT, value VARCHAR)``: ``cls`` numbers the classes -- records sharing the published
    QI values (``by: values``, the default) or ``_class`` (``by: class``) -- and ``value`` is the
    sensitive value as the text a hierarchy lists it by (``value`` is left out without
    ``sensitive``)."""
    by = params.get("by") or "values"
    if by == "class" and CLASS not in table.columns:
        raise InputError(f"{plugin} by class needs the _class column of an algorithm's output")
    quasi = list(table.typing.quasi)
    if by == "values" and not quasi:
        raise InputError(f"{plugin} needs quasi-identifiers in the typing of its input")
    keys = [CLASS] if by == "class" else quasi
    cols = {f"_k{i}": table.column(c) for i, c in enumerate(keys)}
    if CLASS in table.columns:
        cols["_c"] = table.column(CLASS)
    if sensitive is not None:
        cols["_v"] = value_keys(table.column(sensitive))
    data = pa.table(cols)
    order = ", ".join(f"_k{i}" for i in range(len(keys)))
    where = "WHERE _c IS NOT NULL" if "_c" in cols else ""
    value = ", _v AS value" if sensitive is not None else ""
    return ctx.sql(f"SELECT (dense_rank() OVER (ORDER BY {order}) - 1)::BIGINT AS cls{value} FROM d {where}", d=data)


def real_matrix(partition: Partition, s: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(counts, real, values)`` of the real values of ``s`` per class (the typing's missing
    marker is no value), as float64."""
    counts, real, values = real_counts(partition, s)
    return counts.astype(np.float64), real.astype(np.float64), values
