"""``sse-il`` (utility): information loss IL = 100 * SSE / SST of a microaggregated table on
the z-scored numeric quasi-identifiers (SPEC section 8)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anonflow.api import Metric, Param, StepContext, TypedTable

from .. import __version__
from ..common.columns import numeric_columns, numeric_values, zscores


class SseIl(Metric):
    name = "sse-il"
    version = __version__
    description = "Information loss IL = 100 * SSE / SST on z-scored numeric QIs (SPEC section 8)."
    category = "utility"
    params = (
        Param("columns", "list", items="str", default=None, nullable=True,
              help="numeric columns to measure (default: the continuous quasi-identifiers)"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        cols = numeric_columns(original, anonymized, params, self.name)
        Xo = numeric_values(original, cols, self.name)
        Xa = numeric_values(anonymized, cols, self.name)
        Zo, _ = zscores(Xo, cols)
        std = Xo.std(axis=0)
        std = np.where(std == 0, 1.0, std)
        sst = float(np.sum(Zo * Zo))
        diff = (Xo - Xa) / std
        sse = float(np.sum(diff * diff))
        return {"sse-il": 100.0 * sse / sst if sst > 0 else 0.0, "sse-il.sse": sse, "sse-il.sst": sst}


PLUGINS = [SseIl()]
