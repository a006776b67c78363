"""The built-in ``publish`` step: hand the table, ordered by class (:func:`for_publication`),
to a publisher plugin."""

from __future__ import annotations

import os
from typing import Any, Mapping

import pyarrow as pa

from .. import egress
from ..api import Output, StepContext
from ..errors import InputError, WorkflowError
from ..outputs import check_output_path
from ..params import Param, ParamError, validate_params
from ..pgurl import display
from ..schema import CLASS, FRAGMENT, ROW
from ..store import ident
from ..table import TypedTable
from .step import Step, StepOutput, StepRun


def _shown(destination: str) -> str:
    """A destination for a message: a PostgreSQL URL as ``postgresql://user@host:port/db``."""
    if destination.split("://", 1)[0].lower() in ("postgresql", "postgres"):
        return f"postgresql://{display(destination)}"
    return destination


class PublishStep(Step):
    uses = kind = "publish"
    produces = "files"
    stage = 2
    description = "Write a table with a publisher plugin (records ordered by class, row ids dropped)."
    params = (
        Param("publisher", "str", help="a publisher plugin: `csv`, `parquet`, `lossy-join`, `postgres` (tables in a "
                                       "PostgreSQL database, [below](#the-postgres-publisher)), `release` (an "
                                       "audited release directory, [releases.md](releases.md)), or a third party's"),
        Param("row_id", "bool", default=False, help="keep `_row` (the source position) in the output; off because it "
                                                     "can link records back; a release refuses it"),
    )

    def split(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        own = {k: v for k, v in params.items() if k in ("publisher", "row_id")}
        rest = {k: v for k, v in params.items() if k not in own}
        return own, rest

    def check_params(self, given, registry, where, base_dir=None):
        own, reg, rest = self.validate_all(given, registry, where)
        if own["row_id"] and not getattr(reg.obj, "accepts_row_id", True):
            raise WorkflowError(f"publisher {reg.name!r} does not publish _row (row_id: true): the source position "
                                "links each published record back to its original", where=where)
        for key in getattr(reg.obj, "outputs", ("path",)):
            if rest.get(key) is not None:
                check_output_path(rest[key], where=where, param=key)
        try:  # what the publisher can tell without the table (paths, names, a signing key) fails now
            reg.obj.check(rest, workflow_dir=base_dir)
        except InputError as exc:
            raise WorkflowError(exc.message, where=where) from None
        return {**own, **rest}

    def validate_all(self, params: Mapping[str, Any], registry: Any, where: str) -> tuple[dict, Any, dict]:
        own, rest = self.split(params)
        try:
            own = validate_params(self.params, own)
        except ParamError as exc:
            raise WorkflowError(str(exc), where=where) from None
        reg = registry.get("publisher", own["publisher"], where=where)
        try:
            rest = validate_params(reg.obj.params, rest)
        except ParamError as exc:
            raise WorkflowError(f"publisher {reg.name!r}: {exc}", where=where) from None
        return own, reg, rest

    def validate(self, params, inputs, registry, where):
        if not inputs[0].typed:
            raise WorkflowError(f"input {inputs[0].name!r} is not typed; publish a typing or algorithm step's output",
                                where=where)
        return None

    def run(self, table: TypedTable, params: Mapping[str, Any], registry: Any, ctx: StepContext,
            where: str) -> list[Output]:
        own, reg, rest = self.validate_all(params, registry, where)
        reg.obj.check(rest, table=table)
        return reg.obj.publish(for_publication(table, keep_row=own["row_id"], ctx=ctx), rest, ctx)


    def fingerprint_params(self, node: Any, registry: Any) -> dict[str, Any]:
        """The parameters less the publisher's secret ones (a signing key: a new key re-publishes,
        but its value is never recorded)."""
        params = node.params
        if registry.has("publisher", str(params.get("publisher", ""))):
            secret = getattr(registry.get("publisher", params["publisher"]).obj, "secret_params", ())
            params = {k: v for k, v in params.items() if k not in secret}
        return params

    def read_params(self, node: Any, registry: Any) -> dict[str, Any]:
        """What a publish step writes is not read: its output parameters are left out."""
        name = node.params.get("publisher", "")
        outs = getattr(registry.get("publisher", name).obj, "outputs", ("path",)) \
            if registry.has("publisher", name) else ("path",)
        return {k: v for k, v in node.params.items() if k not in outs}

    def execute(self, run: StepRun) -> StepOutput:
        node, ctx = run.node, run.ctx
        if node.name in run.external and not egress.current().replay_external:
            # a re-run of someone else's workflow writes nowhere outside its scratch folder
            run.not_replayed[node.name] = run.external[node.name]
            ctx.note(f"not replayed: this publisher writes outside the output folder "
                     f"({', '.join(_shown(d) for d in run.external[node.name])}), and a re-run writes only "
                     "into its scratch folder")
            return StepOutput()
        if run.output_guard is not None:
            run.output_guard.step = node.name
        outputs = self.run(run.tables[0], node.params, run.registry, ctx, run.where)
        if run.output_guard is not None:
            run.output_guard.written.update((os.path.normpath(o.path), node.name) for o in outputs)
        return StepOutput(outputs=outputs)


def for_publication(table: TypedTable, keep_row: bool = False, ctx: StepContext | None = None) -> TypedTable:
    """Order records by class, then by their published values (never by source position,
    which could link them back), and drop ``_row`` unless asked to keep it. A stored table
    stays in the store: the ordering is a view the publisher reads (or copies) from."""
    cols = table.columns
    if not table.loaded and ctx is not None and ctx.relation is not None:
        keys = ([CLASS] if CLASS in cols else []) + [c for c in cols if c not in (CLASS, ROW, FRAGMENT)]
        nested = {f.name for f in table.schema if pa.types.is_nested(f.type)}
        order = ", ".join(f"{ident(k)} ASC NULLS LAST" for k in [*keys, ROW] if k not in nested)
        shown = ", ".join(ident(c) for c in cols if (keep_row or c != ROW) and c != FRAGMENT)
        view = ctx.relation(f"SELECT {shown} FROM t ORDER BY {order}", rows=table.num_rows, t=table)
        return TypedTable(None, table.typing, table.claims, table.hierarchies, stored=view.stored)
    data = table.data
    keys = ([CLASS] if CLASS in data.column_names else []) + [c for c in data.column_names
                                                              if c not in (CLASS, ROW, FRAGMENT)]
    sortable = [k for k in keys if not pa.types.is_nested(data.column(k).type)] + [ROW]
    data = data.sort_by([(k, "ascending") for k in sortable])
    if not keep_row:
        data = data.drop_columns([ROW])
    if FRAGMENT in data.column_names:  # the engine's, not the data's
        data = data.drop_columns([FRAGMENT])
    return table.replace(data=data)
