"""The built-in ``filter`` step: keep the records an SQL condition selects (sandboxed, see
:func:`anonflow.store.condition_mask`); the rest are counted."""

from __future__ import annotations

from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ..api import StepContext
from ..params import Param
from ..schema import ROW
from ..sandbox import check_condition, condition_mask
from ..table import TypedTable
from .claims import recheck_claims
from .step import Step, StepOutput, StepRun


class FilterStep(Step):
    uses = kind = "filter"
    cacheable = True
    preparation = True
    redone_by_apply = True
    keeps_typing = True
    description = "Keep the records matching an SQL condition (DuckDB dialect); the rest are counted."
    params = (
        Param("where", "str", help="(`filter`) SQL boolean expression over the columns; `_row` is the source "
                                   "position"),
    )

    def validate(self, params, inputs, registry, where):
        check_condition(params["where"], where=where)
        return inputs[0].columns

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext, where: str) -> tuple[TypedTable, dict]:
        # user SQL runs sandboxed (anonflow.store.condition_mask): it sees only the input records, reads no file
        # the condition may read any column, and aggregate over all records (a subquery on
        # ``input``), so the sandbox sees the whole table; only the mask comes back
        ordered = table.data.sort_by(ROW)
        mask = condition_mask(params["where"], ordered, where=where)
        kept = int(pc.sum(mask).as_py() or 0)
        removed = table.num_rows - kept
        ctx.note(f"kept {kept} of {table.num_rows} records ({removed} removed by {params['where']!r})")
        summary = {"records_in": table.num_rows, "records_out": kept, "removed": removed}
        if table.stored is None or ctx.derive is None:
            return table.replace(data=ordered.filter(mask).cast(table.data.schema)), summary
        # in the store: the records kept are written by DuckDB (the mask joined by position)
        out = ctx.derive("SELECT t.* FROM t POSITIONAL JOIN m WHERE m._af_keep", t=TypedTable(None, stored=table.stored),
                         m=pa.table({"_af_keep": mask}))
        return TypedTable(None, table.typing, table.claims, table.hierarchies, stored=out.stored), summary

    def execute(self, run: StepRun) -> StepOutput:
        typed, summary = self.run(run.tables[0], run.node.params, run.ctx, run.where)
        run.keep(recheck_claims(typed, run.node, run.ctx, run.where, run.registry))
        return StepOutput(summary=summary)
