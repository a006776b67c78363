"""The built-in ``sample`` step: a seeded random sample of records (without replacement), in
their original order."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from ..api import StepContext
from ..errors import InputError, WorkflowError
from ..params import Param
from ..table import TypedTable
from .claims import recheck_claims
from .step import Step, StepOutput, StepRun


class SampleStep(Step):
    uses = kind = "sample"
    cacheable = True
    preparation = True
    redone_by_apply = True
    keeps_typing = True
    description = "A seeded random sample of records (without replacement), in their original order."
    params = (
        Param("n", "int", default=None, nullable=True, min=1,
              help="(`sample`) number of records to draw without replacement"),
        Param("fraction", "float", default=None, nullable=True, min=0.0, max=1.0,
              help="(`sample`) or the fraction of records; give exactly one of `n` and `fraction`"),
    )

    def validate(self, params, inputs, registry, where):
        if (params["n"] is None) == (params["fraction"] is None):
            raise WorkflowError("give exactly one of 'n' and 'fraction'", where=where)
        return inputs[0].columns

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext, where: str) -> tuple[TypedTable, dict]:
        n = params["n"] if params["n"] is not None else int(round(params["fraction"] * table.num_rows))
        if n > table.num_rows:
            raise InputError(f"parameter 'n' = {n} is larger than the table ({table.num_rows} records)", where=where)
        chosen = np.sort(ctx.rng.choice(table.num_rows, size=n, replace=False))
        ctx.note(f"sampled {n} of {table.num_rows} records")
        summary = {"records_in": table.num_rows, "records_out": n}
        if table.loaded or ctx.derive is None:
            return table.replace(data=table.data.take(pa.array(chosen))), summary
        # in the store: the chosen positions as a mask joined by position (order kept)
        keep = np.zeros(table.num_rows, dtype=bool)
        keep[chosen] = True
        out = ctx.derive("SELECT t.* FROM t POSITIONAL JOIN m WHERE m._af_keep", t=table,
                         m=pa.table({"_af_keep": keep}))
        return TypedTable(None, table.typing, table.claims, table.hierarchies, stored=out.stored), summary

    def execute(self, run: StepRun) -> StepOutput:
        typed, summary = self.run(run.tables[0], run.node.params, run.ctx, run.where)
        run.keep(recheck_claims(typed, run.node, run.ctx, run.where, run.registry))
        return StepOutput(summary=summary)
