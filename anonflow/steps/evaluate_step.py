"""The built-in ``evaluate`` step: run metric plugins and privacy checks, with thresholds that
fail the run."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pyarrow.compute as pc

from ..api import StepContext
from ..errors import InputError, RunError, WorkflowError
from ..params import Param, ParamError, metric_entries, suggest, validate_params
from ..schema import ROW
from ..store import ident
from ..table import TypedTable
from ..shapes import METRICS, THRESHOLDS
from .step import Step, StepOutput, StepRun


class EvaluateStep(Step):
    uses = kind = "evaluate"
    cacheable = True
    produces = "metrics"
    max_inputs = 2
    description = "Compute metrics and privacy checks on [original, anonymized]; optional thresholds fail the run."
    params = (
        Param("metrics", "any", shape=METRICS, help="metric names, or `{name: {param: value}}`"),
        Param("thresholds", "dict", default={}, shape=THRESHOLDS,
              help="value name -> `{min: x}` and/or `{max: y}`; a miss fails the run (exit 1) after the values are "
                   "stored"),
        Param("enforce", "bool", default=True, help="fail the run when a privacy check does not hold"),
        Param("risk_before", "bool", default=False,
              help="with `[original, anonymized]`: also measure every risk metric (category `risk`) on the "
                   "original, as if it were published unchanged; its values are `<metric>.before` and "
                   "`<metric>.before.<detail>`, and thresholds may name them; its notes begin "
                   "`before (the original as if published):`"),
    )

    def validate(self, params, inputs, registry, where):
        if params.get("risk_before") and len(inputs) < 2:
            raise WorkflowError("risk_before measures the original too: give two inputs, [original, anonymized]",
                                where=where)
        for name, mparams in metric_entries(params["metrics"], where):
            reg = registry.get("metric", name, where=where)
            if reg.obj.requires_original and len(inputs) < 2:
                raise WorkflowError(f"metric {name!r} compares with the original table: give two inputs, "
                                    "[original, anonymized]", where=where)
            try:
                validate_params(reg.obj.params, mparams)
            except ParamError as exc:
                raise WorkflowError(f"metric {name!r}: {exc}", where=where) from None
        names = [n for n, _ in metric_entries(params["metrics"], where)]
        for key, bound in params["thresholds"].items():
            if not any(key == n or key.startswith(n + ".") for n in names):
                raise WorkflowError(f"threshold {key!r} names no value of the listed metrics "
                                    f"({', '.join(names)}){suggest(key, names)}", where=where)
            if not isinstance(bound, Mapping) or not bound or set(bound) - {"min", "max"} or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in bound.values()):
                raise WorkflowError(f"threshold {key!r}: expected {{min: number}} and/or {{max: number}}, got {bound!r}",
                                    where=where)
        for inp in inputs:
            if not inp.typed:
                raise WorkflowError(f"input {inp.name!r} is not typed; evaluate a typing or algorithm step's output",
                                    where=where)
        return None

    def run(self, tables: Sequence[TypedTable], params: Mapping[str, Any], registry: Any, ctx: StepContext,
            where: str) -> tuple[dict[str, float], list[str]]:
        scratch: list[TypedTable] = []
        try:
            return self._evaluate(tables, params, registry, ctx, where, scratch)
        finally:
            for table in scratch:
                ctx.discard(table)

    def _evaluate(self, tables: Sequence[TypedTable], params: Mapping[str, Any], registry: Any, ctx: StepContext,
                  where: str, scratch: list[TypedTable]) -> tuple[dict[str, float], list[str]]:
        original, anonymized = (tables[0], tables[1]) if len(tables) == 2 else (None, tables[0])
        unpublished = original  # every original record, before suppressed ones are set apart
        if original is not None and anonymized.num_rows < original.num_rows and ROW in anonymized.columns:
            # records suppressed by the algorithm: compare the published ones with their originals
            if original.loaded or anonymized.loaded or ctx.derive is None:
                kept = pc.is_in(original.column(ROW), value_set=anonymized.column(ROW).combine_chunks())
                ctx.suppressed = original.num_rows - int(pc.sum(kept).as_py() or 0)
                original = original.replace(data=original.data.filter(kept))
            else:  # in the store
                r = ident(ROW)
                kept_table = ctx.derive(f"SELECT * FROM original WHERE {r} IN (SELECT {r} FROM anonymized)",
                                        ordered=False, original=original, anonymized=anonymized)
                ctx.suppressed = original.num_rows - kept_table.num_rows
                original = kept_table.replace(typing=original.typing, claims=original.claims,
                                              hierarchies=original.hierarchies)
                scratch.append(kept_table)
        values: dict[str, float] = {}
        failures: list[str] = []
        for name, given in metric_entries(params["metrics"], where):
            reg = registry.get("metric", name, where=where)
            mparams = validate_params(reg.obj.params, given)
            if original is not None:
                reg.obj.check(mparams, original=original, anonymized=anonymized)
            else:
                reg.obj.check(mparams, anonymized=anonymized)
            result = self._compute(reg, name, original, anonymized, mparams, ctx, where)
            values.update(self._values(name, result, where))
            if params.get("risk_before") and reg.obj.category == "risk" and unpublished is not None:
                # the same measure on the original, as if it were published unchanged; its
                # notes say so (they would read as a second, contradicting note on the release)
                said = len(ctx.notes)
                before = self._compute(reg, name, None, unpublished, mparams, ctx, where)
                ctx.notes[said:] = [f"before (the original as if published): {n}" for n in ctx.notes[said:]]
                values.update(self._values(name, {name + ".before" + k[len(name):]: v for k, v in before.items()},
                                           where))
            holds = result.get(f"{name}.holds")
            if params["enforce"] and reg.obj.category == "privacy" and holds is not None and not holds:
                failures.append(f"privacy check {name!r} does not hold ({_fmt_detail(name, result)})")
        for key, bound in params["thresholds"].items():
            if key not in values:
                raise WorkflowError(f"threshold {key!r}: the metrics returned no such value; they returned "
                                    f"{', '.join(values)}", where=where)
            v = values[key]
            if "min" in bound and not (v >= bound["min"]):
                failures.append(f"{key} = {v:g} is below the threshold min {bound['min']:g}")
            if "max" in bound and not (v <= bound["max"]):
                failures.append(f"{key} = {v:g} is above the threshold max {bound['max']:g}")
        return values, failures


    def references(self, node: Any, given: Any, registry: Any, where: str) -> list[str]:
        """The tables the metrics name by parameters of kind ``step``."""
        given = given if isinstance(given, dict) else {}
        found: list[str] = []
        if "metrics" in given:
            for name, mparams in metric_entries(given["metrics"], where):
                if registry.has("metric", name) and isinstance(mparams, dict):
                    found.extend(str(mparams[p.name]) for p in registry.get("metric", name).obj.params
                                 if p.kind == "step" and isinstance(mparams.get(p.name), str))
        return found

    def execute(self, run: StepRun) -> StepOutput:
        metrics, failures = self.run(run.tables, run.node.params, run.registry, run.ctx, run.where)
        return StepOutput(metrics=metrics, failures=failures)


    @staticmethod
    def _compute(reg: Any, name: str, original: TypedTable | None, anonymized: TypedTable,
                 mparams: Mapping[str, Any], ctx: StepContext, where: str) -> Mapping[str, Any]:
        try:
            return reg.obj.compute(original, anonymized, mparams, ctx)
        except (InputError, RunError):
            raise
        except Exception as exc:
            raise RunError(f"metric {name!r} ({reg.distribution} {reg.version}) failed: "
                           f"{type(exc).__name__}: {exc}", where=where) from exc

    @staticmethod
    def _values(name: str, result: Mapping[str, Any], where: str) -> dict[str, float]:
        """A metric's values as numbers, each named ``name`` or ``name.<detail>``."""
        values: dict[str, float] = {}
        for key, value in result.items():
            if key != name and not key.startswith(name + "."):
                raise RunError(f"metric {name!r} returned the value {key!r}; names must start with {name!r}",
                               where=where)
            try:
                values[key] = float(value)
            except (TypeError, ValueError):
                raise RunError(f"metric {name!r} returned a non-number for {key!r}: {value!r}",
                               where=where) from None
        return values


def _fmt_detail(name: str, result: Mapping[str, Any]) -> str:
    parts = [f"{k} = {float(v):g}" for k, v in result.items() if k != f"{name}.holds"]
    return ", ".join(parts)
