"""Microaggregation algorithms."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, Algorithm, InputError, Param, StepContext, TypedTable

from . import __version__
from .common import continuous_quasi, zscores


def publish_group_means(table: TypedTable, columns: list[str], X: np.ndarray, labels: np.ndarray) -> TypedTable:
    """Replace each column by its group mean (original units) and add the ``_class`` column."""
    counts = np.bincount(labels)
    data = table.data
    for j, name in enumerate(columns):
        means = np.bincount(labels, weights=X[:, j], minlength=counts.size) / counts
        data = data.set_column(data.column_names.index(name), name, pa.array(means[labels], type=pa.float64()))
    return table.replace(data=data.append_column(CLASS, pa.array(labels, type=pa.int64())))


class Mdav(Algorithm):
    name = "mdav"
    version = __version__
    description = "MDAV microaggregation: fixed-size groups of k on z-scored numeric QIs, group means published."
    params = (
        Param("k", "int", min=2, help="minimum group size (groups have k records, the last k..2k-1)"),
        Param("standardize", "bool", default=True, help="z-score the QIs (population std) before clustering"),
    )

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        return {"k-anonymity": {"k": params["k"]}}

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        continuous_quasi(table, self.name)
        if params["k"] > table.num_rows:
            raise InputError(f"parameter 'k' = {params['k']} is larger than the table ({table.num_rows} records)")

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        from .microagg import mdav_partition

        quasi = continuous_quasi(table, self.name)
        X = table.numeric(quasi)
        Z = X
        if params["standardize"]:
            Z, constant = zscores(X, quasi)
            if constant:
                ctx.note(f"constant column(s) {', '.join(constant)} carry no distance and were ignored for grouping")
        advance = ctx.progress(table.num_rows, "mdav")
        done = [0]

        def report(assigned: int) -> None:
            advance(assigned - done[0])
            done[0] = assigned

        labels = mdav_partition(np.ascontiguousarray(Z), params["k"], progress=report)
        report(table.num_rows)
        ctx.note(f"{int(labels.max()) + 1} groups")
        return publish_group_means(table, quasi, X, labels)


PLUGINS = [Mdav()]
