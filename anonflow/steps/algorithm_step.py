"""Algorithm steps: a plugin's algorithm run on a typed table, held to what it may do.

The output must hold exactly the input's records (none dropped, none invented), declare every
column it adds, and claim only what its records satisfy (:func:`anonflow.steps.claims.check_claims`);
records it suppresses (a null ``_class``) are split off into a table of their own, within the
algorithm's cap (:func:`check_suppression`); its classes are numbered by what they publish
(:func:`renumber_classes`). On a partitioned table it runs per fragment group on the run's
executor, which the run loop hands over (:attr:`anonflow.steps.step.StepRun.fragments`).
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..api import StepContext, suppression_limit
from ..canonjson import canonical_json
from ..errors import InputError, PluginError, RunError, WorkflowError
from ..params import ParamError, validate_params
from ..schema import CLASS, FRAGMENT, ROW
from ..store import ident
from ..table import TypedTable
from .claims import check_claims
from .step import Step, StepOutput, StepRun


class AlgorithmStep(Step):
    """A step whose ``uses:`` names an algorithm plugin."""

    kind = "algorithm"
    cacheable = True
    keeps_typing = True
    runs_fragments = True
    description = "An algorithm plugin: anonymize a typed table."

    def input_range(self, node: Any) -> tuple[int, int]:
        return node.plugin.obj.inputs, node.plugin.obj.inputs

    def plan(self, node: Any, given: Any, inputs: Any, registry: Any, where: str, base_dir: Any = None) -> None:
        if not all(i.typed for i in inputs):
            raise WorkflowError(f"algorithm {node.uses!r} needs a typed table: add a typing step "
                                f"between {inputs[0].name!r} and {node.name!r}", where=where)
        try:
            node.params = validate_params(node.plugin.obj.params, given)
        except ParamError as exc:
            raise WorkflowError(str(exc), where=where) from None
        node.columns = None if inputs[0].columns is None else (*inputs[0].columns, CLASS)
        node.typed = self.typed(inputs)

    def references(self, node: Any, given: Any, registry: Any, where: str) -> list[str]:
        """The tables the algorithm names by parameters of kind ``step``, and what its
        :meth:`~anonflow.api.Algorithm.references` adds."""
        given = given if isinstance(given, dict) else {}
        if node.plugin is None:
            return []
        algo = node.plugin.obj
        found = [str(given[p.name]) for p in algo.params if p.kind == "step" and isinstance(given.get(p.name), str)]
        try:
            found.extend(str(r) for r in algo.references(given) or [])
        except (TypeError, ValueError, KeyError, AttributeError):  # malformed parameters: validation says so
            pass
        return found

    def execute(self, run: StepRun) -> StepOutput:
        node, ctx, where = run.node, run.ctx, run.where
        table = run.tables[0]
        typed, suppressed = run_algorithm(node, table, ctx, where, store=run.store, registry=run.registry,
                                          fragments=run.fragments)
        run.keep(typed)
        algo = node.plugin.obj
        out = StepOutput()
        perturbs = declared_perturbations(node, table, where)
        if perturbs:
            out.summary.update(perturbs=perturbs)
        if algo.suppresses or suppressed is not None:
            # the step's recorded summary: suppressed records and the cap, in records
            n_in = table.num_rows
            out.summary.update(suppressed=0 if suppressed is None else suppressed.num_rows,
                               suppression_limit=suppression_limit(algo.suppression_cap(node.params), n_in))
        if suppressed is not None:
            art = run.store.put(suppressed, run_id=run.run_id, step=node.name)
            out.summary.update(suppressed_table=art.table)
            ctx.note(f"{art.rows} record(s) suppressed, {art.rows / n_in:.2%} of {n_in} (cap "
                     f"{algo.suppression_param} = {algo.suppression_cap(node.params):g}: at most "
                     f"{out.summary['suppression_limit']}); they are kept in table {art.table} "
                     f"(view steps.\"{run.view}.suppressed\")")
            out.edges += [(p, art.table) for p in run.parents]
            run.store.view(f"{run.view}.suppressed", art.table)
        return out


def declared_perturbations(node: Any, table: TypedTable, where: str) -> dict[str, dict[str, Any]]:
    """What the algorithm says it changed (:meth:`anonflow.api.Algorithm.perturbs`), checked:
    a mapping of the input's columns to JSON mappings whose ``kind`` is one of
    :attr:`~anonflow.api.Algorithm.PERTURBATION_KINDS`; sorted by column."""
    algo = node.plugin.obj
    who = f"algorithm {node.uses!r} ({node.plugin.distribution} {node.version})"
    try:
        declared = algo.perturbs(node.params, table=table)
    except (InputError, ParamError):
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's bug is reported as the plugin's, in one line
        raise PluginError(f"{who}: perturbs() failed: {type(exc).__name__}: {exc}", where=where) from None
    if not declared:
        return {}
    if not isinstance(declared, dict):
        raise PluginError(f"{who}: perturbs() returned {type(declared).__name__}, expected a mapping of column -> "
                          "declaration", where=where)
    kinds = type(algo).PERTURBATION_KINDS
    out: dict[str, dict[str, Any]] = {}
    for column in sorted(declared, key=str):
        what = declared[column]
        if not isinstance(column, str) or column not in table.columns or column in (ROW, CLASS, FRAGMENT):
            raise PluginError(f"{who}: perturbs() names {column!r}, which is not a column of its input", where=where)
        if not isinstance(what, dict) or what.get("kind") not in kinds:
            raise PluginError(f"{who}: perturbs() must give column {column!r} a mapping with 'kind' one of "
                              f"{', '.join(kinds)}; got {what!r}", where=where)
        try:
            out[column] = json.loads(canonical_json(what, strict=True))
        except (TypeError, ValueError) as exc:
            raise PluginError(f"{who}: perturbs() for column {column!r} is not JSON data: {exc}", where=where) from None
    return out


def run_algorithm(node: Any, table: TypedTable, ctx: StepContext, where: str, *, store: Any, registry: Any,
                  fragments: Callable[..., TypedTable] | None) -> tuple[TypedTable, TypedTable | None]:
    """Run an algorithm; return (published records, suppressed records or None).

    Suppressed records are those the algorithm returns with a null ``_class``: they are
    never silently dropped, but split off into a table of their own. ``fragments`` runs it
    on a partitioned table (the run loop's executor)."""
    algo = node.plugin.obj
    # a chain of algorithms: the claims of the input (an earlier algorithm's output) are
    # candidates for this step's output, kept only where re-checked on it (_check_claims)
    inherited = dict(table.claims) if algo.inputs == 1 else {}
    if algo.inputs == 1 and (CLASS in table.columns or table.claims):
        # another algorithm's output: its classes and its claims are not this step's. The
        # algorithm starts from the records (a two-input algorithm reads the partition itself)
        if CLASS in table.columns and not table.loaded:
            cols = ", ".join(ident(c) for c in table.columns if c != CLASS)
            table = ctx.derive(f"SELECT {cols} FROM input", input=table).replace(
                typing=table.typing, hierarchies=table.hierarchies)
        elif CLASS in table.columns:
            table = table.replace(data=table.data.drop_columns([CLASS]))
        table = table.replace(claims={})
        ctx.inputs = [table, *ctx.inputs[1:]]
    if FRAGMENT in table.columns:
        out = fragments(node, table, ctx, where)
    else:
        algo.check(node.params, table=table)
        out = algo.run(table, node.params, ctx)
    if not isinstance(out, TypedTable):
        raise RunError(f"algorithm {node.uses!r} returned {type(out).__name__}, expected a TypedTable", where=where)
    # never silently drop (or invent) records: the output must hold exactly the input's records
    if FRAGMENT in out.columns:
        raise RunError(f"algorithm {node.uses!r} returned the {FRAGMENT} column; it is the engine's", where=where)
    if out.num_rows != table.num_rows or ROW not in out.columns or not store.same_rows(out, table):
        raise RunError(f"algorithm {node.uses!r} returned {out.num_rows} records for {table.num_rows} input "
                       "records (or changed their _row ids); every record must be accounted for", where=where)
    if CLASS not in out.columns:
        raise RunError(f"algorithm {node.uses!r} returned no {CLASS} column", where=where)
    # every column a release may publish is declared: one an algorithm adds (the bounds of a
    # generalized value, say) without a typing would be published without anyone saying what it is
    undeclared = [c for c in out.columns if c not in (ROW, CLASS, FRAGMENT) and c not in out.typing
                  and c not in table.columns]
    if undeclared:
        raise RunError(f"algorithm {node.uses!r} ({node.plugin.distribution} {node.version}) returned column(s) "
                       f"{', '.join(map(repr, undeclared))} that its output's typing does not declare; give each "
                       "an Attribute in the returned table's typing (anonflow.api.mark_generalized declares "
                       "the bounds of generalized values) or leave it out", where=where)
    # the output claims what this algorithm declares for these parameters, and what its run
    # found (a model's parameter known only from the data, e.g. refine's k); every claim is
    # then checked on the published records, so no table downstream relies on a false one
    # (a claim a two-input algorithm copied from its input stays only if it still holds)
    out = out.replace(claims={**out.claims, **algo.claims(node.params)})
    inherited = {m: g for m, g in inherited.items() if m not in out.claims}
    nulls = out.column(CLASS).null_count
    if not nulls:
        return check_claims(node, renumber_classes(out, store), ctx, where, registry, inherited), None
    check_suppression(node, nulls, table.num_rows, where, partitioned=FRAGMENT in table.columns)
    if out.loaded:
        keep = pc.is_valid(out.data.column(CLASS))
        suppressed = out.replace(data=out.data.filter(pc.invert(keep)).drop_columns([CLASS]), claims={})
        published = out.replace(data=out.data.filter(keep))
    else:  # split in the store
        others = ", ".join(ident(c) for c in out.columns if c != CLASS)
        c = ident(CLASS)
        suppressed = ctx.derive(f"SELECT {others} FROM output WHERE {c} IS NULL", output=out).replace(
            typing=out.typing, hierarchies=out.hierarchies)
        published = ctx.derive(f"SELECT * FROM output WHERE {c} IS NOT NULL", output=out).replace(
            typing=out.typing, claims=out.claims, hierarchies=out.hierarchies)
        store.discard(out)
    return check_claims(node, renumber_classes(published, store), ctx, where, registry, inherited), suppressed

def renumber_classes(table: TypedTable, store: Any) -> TypedTable:
    """Class ids numbered by what the classes publish, never by what an algorithm chose.

    An algorithm's ids can follow the source order (a perturbation that groups nothing
    returns ``arange(n)``; a grouping one may number classes as it met their first
    records), and the publisher orders records by class: the file would then list records
    in source order. Each class's key is its records' published values (every column but
    ``_row``, ``_class``, ``_fragment`` and nested ones, as one tuple): the smallest tuple,
    the largest, the number of records, and, only for classes equal in all three, the
    sorted list of all their tuples. Classes are numbered 0, 1, ... in key order; classes
    that tie even there publish the same records, and take the order of the algorithm's
    ids, which then shows nothing. The partition itself is unchanged, and a table already
    numbered so is returned as it is."""
    cols = [c for c in table.columns if c not in (ROW, CLASS, FRAGMENT)
            and not pa.types.is_nested(table.schema.field(c).type)]
    fields = ", ".join(f"f{i} := {ident(c)}" for i, c in enumerate(cols))
    value = f"struct_pack({fields})" if cols else "NULL::INTEGER"
    c = ident(CLASS)
    mapping = store.sql(f"""
        WITH r AS (SELECT {c} AS c, {value} AS s FROM t WHERE {c} IS NOT NULL),
             k AS (SELECT c, min(s) AS lo, max(s) AS hi, count(*) AS n FROM r GROUP BY c),
             kk AS (SELECT *, count(*) OVER (PARTITION BY lo, hi, n) AS ties FROM k),
             tied AS (SELECT r.c, list(r.s ORDER BY r.s) AS content FROM r
                      SEMI JOIN (SELECT c FROM kk WHERE ties > 1) USING (c) GROUP BY r.c)
        SELECT kk.c AS old, (row_number() OVER (ORDER BY kk.lo, kk.hi, kk.n, tied.content, kk.c) - 1)::BIGINT
               AS new
        FROM kk LEFT JOIN tied USING (c)""", t=table)
    kind = table.schema.field(CLASS).type
    integer = pa.types.is_integer(kind)
    new = mapping.column("new").to_numpy(zero_copy_only=False)
    if integer and np.array_equal(mapping.column("old").to_numpy(zero_copy_only=False), new):
        return table
    kind = kind if integer else pa.int64()
    if table.loaded:
        at = pc.index_in(table.data.column(CLASS), value_set=mapping.column("old")).to_numpy(zero_copy_only=False)
        data = table.data.set_column(table.data.column_names.index(CLASS), CLASS,
                                     pa.array(new[at], pa.int64()).cast(kind))
        return table.replace(data=data)
    out = store.derive_table(f"SELECT t.* REPLACE (CAST(m.new AS {_duckdb_int(kind)}) AS {c}) FROM t "
                                  f"JOIN m ON t.{c} = m.old", ordered=False, t=table, m=mapping)
    store.discard(table)
    return out.replace(typing=table.typing, claims=table.claims, hierarchies=table.hierarchies)


def _duckdb_int(kind: pa.DataType) -> str:
    """The DuckDB name of an Arrow integer type (a ``_class`` column keeps its type)."""
    names = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INTEGER", pa.uint8(): "UTINYINT",
             pa.uint16(): "USMALLINT", pa.uint32(): "UINTEGER", pa.uint64(): "UBIGINT"}
    return names.get(kind, "BIGINT")


def check_suppression(node: Any, suppressed: int, records: int, where: str, partitioned: bool = False) -> None:
    """Hold an algorithm to its suppression cap (:meth:`Algorithm.suppression_cap`): one
    that does not declare ``suppresses`` may suppress nothing."""
    algo = node.plugin.obj
    if not algo.suppresses:
        raise PluginError(f"algorithm {node.uses!r} ({node.plugin.distribution} {node.version}) suppressed "
                          f"{suppressed} of {records} records (null {CLASS}) but does not declare that it "
                          "suppresses records (Algorithm.suppresses), so none may be suppressed", where=where)
    cap = algo.suppression_cap(node.params)
    limit = suppression_limit(cap, records)
    if suppressed <= limit:
        return
    need = min(math.ceil(suppressed / records * 100 - 1e-9) / 100, 1.0)
    while need < 1.0 and suppression_limit(need, records) < suppressed:
        need = min(round(need + 0.01, 2), 1.0)
    param = algo.suppression_param
    raise RunError(f"{node.uses} would suppress {suppressed} of {records} records ({suppressed / records:.1%}), "
                   f"more than its cap {param} = {cap:g} allows ({limit} records); to accept that, raise the "
                   f"cap: --set {node.name}.{param}={need:g} (or relax the privacy parameters"
                   + (", or cut larger fragments: each fragment's leftovers are suppressed on their own"
                      if partitioned else "") + ")", where=where)
