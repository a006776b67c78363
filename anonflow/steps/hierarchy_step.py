"""The built-in ``hierarchy`` step: build generalization hierarchies with the hierarchy-builder
plugins and attach them to the table (SPEC section 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..api import StepContext, file_sha256
from ..errors import InputError, WorkflowError
from ..hierarchy import Hierarchy
from ..params import ParamError, suggest, validate_params
from ..schema import ROW
from ..store import ident
from ..table import TypedTable
from .step import Step, StepOutput, StepRun


class HierarchyStep(Step):
    uses = kind = "hierarchy"
    cacheable = True
    preparation = True
    redone_by_apply = True
    makes_typing = True
    description = "Build generalization hierarchies for columns and attach them to the table (SPEC section 2)."
    params = ()  # one entry per column: {column: {builder: parameters}}

    def check_params(self, given, registry, where, base_dir=None):
        if not given:
            raise WorkflowError("name at least one column: {column: {builder: parameters}}, e.g. "
                                "age: {interval: [5, 10, 20]}", where=where)
        out: dict[str, Any] = {}
        for column, spec in given.items():
            cwhere = f"{where}: column {column!r}"
            if not isinstance(spec, Mapping) or len(spec) != 1:
                raise WorkflowError("expected {builder: parameters}, e.g. {interval: [5, 10, 20]} or "
                                    f"{{arx: hierarchy.csv}}; builders: {', '.join(registry.names('hierarchy'))}",
                                    where=cwhere)
            (name, bparams), = spec.items()
            reg = registry.get("hierarchy", str(name), where=cwhere)
            builder = reg.obj
            declared = {p.name: p for p in builder.params}
            primary = declared.get(builder.primary or "")
            if isinstance(bparams, Mapping) and primary is not None and primary.kind in ("dict", "any") \
                    and not set(bparams) <= set(declared):
                bparams = {builder.primary: bparams}  # {taxonomy: {Europe: [...]}} is the tree itself
            if not isinstance(bparams, Mapping):
                if builder.primary is None:
                    raise WorkflowError(f"hierarchy builder {reg.name!r} takes a mapping of parameters", where=cwhere)
                bparams = {builder.primary: bparams}
            try:
                validated = validate_params(builder.params, bparams)
            except ParamError as exc:
                raise WorkflowError(f"hierarchy builder {reg.name!r}: {exc}", where=cwhere) from None
            files = {}
            for key in builder.files:
                if validated.get(key) is None:
                    continue
                path = ((base_dir or Path.cwd()) / str(validated[key])).resolve()
                if not path.is_file():
                    raise WorkflowError(f"hierarchy file not found: {path}", where=cwhere)
                validated[key] = str(path)
                files[key] = file_sha256(path)
            out[str(column)] = {"builder": reg.name, "version": reg.version, "params": validated, "files": files}
        return out

    def validate(self, params, inputs, registry, where):
        if not inputs[0].typed:
            raise WorkflowError(f"input {inputs[0].name!r} is not typed; build hierarchies on a typing step's "
                                "output", where=where)
        cols = inputs[0].columns
        if cols is not None:
            for column in params:
                if column not in cols:
                    raise WorkflowError(f"column {column!r} is not in input {inputs[0].name!r}"
                                        f"{suggest(column, cols)}", where=where)
        return cols

    def run(self, table: TypedTable, params: Mapping[str, Any], registry: Any, ctx: StepContext,
            where: str) -> tuple[TypedTable, dict]:
        hierarchies = dict(table.hierarchies)
        summary: dict[str, Any] = {"hierarchies": {}}
        for column, spec in params.items():
            reg = registry.get("hierarchy", spec["builder"], where=where)
            cwhere = f"{where}: column {column!r}"
            try:  # the builder's own check, with the table and the column it is for (plan runs it too)
                reg.obj.check(spec["params"], table=table, column=column)
            except InputError as exc:
                raise InputError(f"hierarchy builder {reg.name!r}: {exc.message}", where=cwhere) from None
            # the column's distinct values in order of first appearance (DuckDB groups them)
            values = ctx.sql(f"SELECT {ident(column)} AS v FROM t WHERE {ident(column)} IS NOT NULL GROUP BY 1 "
                             f"ORDER BY min({ident(ROW)})", t=table).column("v").combine_chunks()
            origin = spec["params"].get("file") or reg.name
            built = reg.obj.build(column, values, spec["params"], ctx)
            h = Hierarchy.from_levels(column, [built.level(i) for i in range(built.height + 1)], builder=reg.name)
            h.validate(cwhere, str(origin))
            h.check_covers(values, cwhere, str(origin))
            hierarchies[column] = h
            summary["hierarchies"][column] = h.describe()
            ctx.note(f"{column}: {reg.name} hierarchy with levels 0..{h.height} "
                     f"({' / '.join(map(str, h.describe()['distinct_per_level']))} distinct values)")
        return table.replace(hierarchies=hierarchies), summary


    def execute(self, run: StepRun) -> StepOutput:
        typed, summary = self.run(run.tables[0], run.node.params, run.registry, run.ctx, run.where)
        run.keep(typed)
        return StepOutput(summary=summary)

    def preview(self, summary: dict[str, Any], output: Any) -> dict[str, Any]:
        return {"hierarchies": summary.get("hierarchies", {}), "notes": summary.get("notes", [])}


