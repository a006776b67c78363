"""Building and validating the workflow graph.

:func:`build_plan` turns a :class:`~anonflow.spec.WorkflowSpec` into a networkx DiGraph of
sources and steps and rejects, before anything runs: unknown plugins (with "did you
mean"), missing inputs, cycles (naming the cycle), steps fed the wrong kind of input, bad
parameters, and columns that do not exist in the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from . import __version__
from .builtins import BUILTINS, StaticInput
from .errors import AnonflowError, InputError, WorkflowError
from .params import ParamError, suggest, validate_params
from .plugins import Registered, Registry
from .schema import CLASS, FRAGMENT, ROW
from .spec import SourceSpec, WorkflowSpec
from .store import describe_source


@dataclass
class Node:
    """A source or a step, ready to run."""

    name: str
    kind: str  # source | typing | hierarchy | algorithm | evaluate | publish
    uses: str
    inputs: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    version: str = __version__
    plugin: Registered | None = None
    source: SourceSpec | None = None
    columns: tuple[str, ...] | None = None
    produces: str = "table"
    typed: bool = False
    #: other sources or steps whose tables the step's plugins read through ``ctx.table``
    #: (parameters of kind ``step``): they run first and count in the fingerprint
    refs: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "uses": self.uses,
                               "inputs": list(self.inputs), "version": self.version}
        if self.source is not None:
            out["source"] = self.source.describe()
        else:
            out["params"] = self.params
        if self.plugin is not None:
            out["distribution"] = self.plugin.distribution
        if self.columns is not None:
            out["columns"] = [c for c in self.columns if c != ROW]
        return out


@dataclass
class Plan:
    spec: WorkflowSpec
    graph: nx.DiGraph
    order: list[str]
    nodes: dict[str, Node]

    def steps(self) -> list[Node]:
        return [self.nodes[n] for n in self.order]


def _uses_hint(uses: str, registry: Registry) -> str:
    names = list(BUILTINS) + registry.names("algorithm")
    return suggest(uses, names) or f"; built-in steps: {', '.join(BUILTINS)}; algorithms: " + \
        (", ".join(registry.names("algorithm")) or "none installed")


def build_plan(spec: WorkflowSpec, registry: Registry, *, check_columns: bool = True) -> Plan:
    """Validate ``spec`` completely and return the plan to run."""
    graph = nx.DiGraph()
    nodes: dict[str, Node] = {}
    for name, src in spec.sources.items():
        nodes[name] = Node(name=name, kind="source", uses=src.format, source=src)
        graph.add_node(name)

    for name, step in spec.steps.items():
        where = spec.where(f"step {name!r}")
        if step.uses in BUILTINS:
            b = BUILTINS[step.uses]
            node = Node(name=name, kind=b.kind, uses=step.uses, inputs=step.inputs, produces=b.produces)
        elif registry.has("algorithm", step.uses):
            reg = registry.get("algorithm", step.uses)
            node = Node(name=name, kind="algorithm", uses=step.uses, inputs=step.inputs, plugin=reg,
                        version=reg.version)
        else:
            raise WorkflowError(f"unknown step or algorithm {step.uses!r}{_uses_hint(step.uses, registry)}",
                                where=where)
        known = list(spec.sources) + list(spec.steps)
        node.refs = tuple(dict.fromkeys(_references(node, step.params, registry, where)))
        for ref in node.refs:
            if ref not in known:
                raise WorkflowError(f"a parameter names the table {ref!r}, which is neither a source nor a step"
                                    f"{suggest(ref, known)}", where=where)
        for ref in (*step.inputs, *step.after, *node.refs):
            if ref not in known:
                raise WorkflowError(f"input {ref!r} is neither a source nor a step{suggest(ref, known)}", where=where)
            if ref == name:
                raise WorkflowError("a step cannot take its own output as input (cycle: "
                                    f"{name} -> {name})", where=where)
            graph.add_edge(ref, name)
        graph.add_node(name)
        nodes[name] = node

    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        path = " -> ".join([cycle[0][0], *[v for _, v in cycle]])
        raise WorkflowError(f"the steps form a cycle: {path}", where=str(spec.path))

    def priority(n: str) -> tuple:
        node = nodes[n]
        # sources first; publishing last, so that evaluation (and its thresholds) gate it
        rank = 0 if node.kind == "source" else (2 if node.kind == "publish" else 1)
        index = spec.steps[n].index if n in spec.steps else list(spec.sources).index(n)
        return (rank, index)

    order = list(nx.lexicographical_topological_sort(graph, key=priority))
    order = [n for n in order if nodes[n].kind == "source" and graph.out_degree(n) > 0 or nodes[n].kind != "source"]

    for n in order:
        node = nodes[n]
        if node.kind == "source":
            if check_columns:
                node.columns = (ROW, *[c for c, _ in _describe(spec, node.source)])
            continue
        where = spec.where(f"step {n!r}")
        ins = [nodes[i] for i in node.inputs]
        if node.kind == "algorithm":
            lo = hi = node.plugin.obj.inputs
        else:
            lo, hi = BUILTINS[node.uses].min_inputs, BUILTINS[node.uses].max_inputs
        if not lo <= len(ins) <= hi:
            want = f"{lo}" if lo == hi else f"{lo} to {hi}"
            raise WorkflowError(f"{node.uses} takes {want} input(s), got {len(ins)}", where=where)
        for i in [*ins, *(nodes[r] for r in node.refs)]:
            if i.produces != "table":
                raise WorkflowError(f"input {i.name!r} is a {i.uses} step and produces no table", where=where)
        static = [StaticInput(i.name, i.columns, i.typed) for i in ins]
        given = spec.steps[n].params
        if node.kind == "algorithm":
            if not all(i.typed for i in static):
                raise WorkflowError(f"algorithm {node.uses!r} needs a typed table: add a typing step "
                                    f"between {static[0].name!r} and {n!r}", where=where)
            try:
                node.params = validate_params(node.plugin.obj.params, given)
            except ParamError as exc:
                raise WorkflowError(str(exc), where=where) from None
            node.columns = None if static[0].columns is None else (*static[0].columns, CLASS)
            node.typed = True
        else:
            b = BUILTINS[node.uses]
            node.params = b.check_params(given, registry, where, spec.base_dir)
            node.columns = b.validate(node.params, static, registry, where)
            node.typed = node.kind in ("typing", "hierarchy") or \
                (node.kind in ("filter", "sample", "partition") and static[0].typed)
    return Plan(spec=spec, graph=graph, order=order, nodes=nodes)


def _references(node: Node, given: Any, registry: Registry, where: str) -> list[str]:
    """The tables a step's plugins name by parameters of kind ``step`` (an evaluate step's
    metrics; an algorithm, and what its :meth:`~anonflow.api.Algorithm.references` adds),
    read from the parameters as written (they are validated later)."""
    from .builtins import metric_entries

    given = given if isinstance(given, dict) else {}
    found: list[str] = []

    def take(params: Any, values: Any) -> None:
        if isinstance(values, dict):
            found.extend(str(values[p.name]) for p in params
                         if p.kind == "step" and isinstance(values.get(p.name), str))

    if node.kind == "evaluate" and "metrics" in given:
        for name, mparams in metric_entries(given["metrics"], where):
            if registry.has("metric", name):
                take(registry.get("metric", name).obj.params, mparams)
    elif node.kind == "algorithm" and node.plugin is not None:
        algo = node.plugin.obj
        take(algo.params, given)
        try:
            found.extend(str(r) for r in algo.references(given) or [])
        except (TypeError, ValueError, KeyError, AttributeError):  # malformed parameters: validation says so
            pass
    return found


def fragment_plan(algo: Any, params: dict[str, Any], table: Any, registry: Registry, store: Any) -> list[str]:
    """What ``anonflow plan`` says of an algorithm fed by a partitioned table: how it will
    run on the fragments, and which fragments it merges with neighbours first."""
    from .api import StepContext
    from .fragments import describe_sizes, fragment_groups

    if algo.summarizes(params):
        return [f"{algo.name}: each fragment's summary is computed where it lies and summed; then one run on "
                "the whole table"]
    if not algo.per_fragment:
        return [f"{algo.name} does not run per fragment: it runs on the whole table"]
    ctx = StepContext(step="plan", seed=0, rng=None, workflow_dir=Path("."), output_dir=Path("."),  # type: ignore
                      sql=lambda q, p=None, **t: store.sql(q, p, **t), derive=store.derive_table,
                      discard=store.discard)
    grouping = fragment_groups(algo, params, table, registry, ctx)
    import numpy as np

    return [f"{algo.name} runs once per fragment group: {len(grouping.groups)} group(s) of "
            f"{describe_sizes(np.asarray(grouping.sizes))} records", *grouping.notes]


def _describe(spec: WorkflowSpec, src: SourceSpec) -> list[tuple[str, str]]:
    try:
        return describe_source(src)
    except InputError as exc:
        raise InputError(exc.message, where=spec.where(exc.where or f"source {src.name!r}")) from None


def plan_json(plan: Plan, previews: dict[str, Any]) -> dict[str, Any]:
    """What ``anonflow plan --json`` prints (and ``anonflow.Workflow.plan`` returns):
    ``{"workflow", "seed", "steps"}``, each step as :meth:`Node.to_json` with, from
    :func:`preview`, its typing (a typing step) or its notes and fragments."""
    steps = [n.to_json() for n in plan.steps()]
    for s in steps:
        shown = previews.get(s["name"])
        if shown is None:
            continue
        if "typing" in shown:
            s["typing"] = shown["typing"].to_json()
        else:
            s["notes"] = shown["notes"]
            if "fragments" in shown:
                s["fragments"] = shown["fragments"]
    return {"workflow": plan.spec.name, "seed": plan.spec.seed, "steps": steps}


#: step kinds that only prepare data: ``anonflow plan`` runs them (in memory) to show what the
#: algorithms will face.
PREPARATION = ("source", "typing", "filter", "sample", "hierarchy", "partition")


def preview(plan: Plan, registry: Registry) -> dict[str, Any]:
    """What ``anonflow plan`` shows beyond the parameters, computed on the data in a
    throw-away in-memory store (nothing is written anywhere).

    The preparation steps (sources, typing, filter, sample, hierarchy) whose inputs are all
    preparation steps are run; their errors (a hierarchy missing a value, a bad grading...)
    surface here, before anything runs for real. Returns, per step name: for a typing step,
    ``{"typing", "summary", "notes"}``; for a hierarchy step, ``{"hierarchies", "notes"}``
    (each column's builder, height and distinct values per level); for an algorithm fed by preparation steps only, its
    :meth:`~anonflow.api.Algorithm.check` has passed and ``{"notes": [...]}`` holds its
    :meth:`~anonflow.api.Algorithm.describe_plan` lines (the lattice's size, for one). Each
    evaluate step's metrics are checked against the previewed tables (see :func:`_check_metrics`):
    a metric needing a grading or a label the typing lacks fails the plan."""
    from .runner import Runner
    from .store import Store

    ready: list[str] = []
    for name in plan.order:
        node = plan.nodes[name]
        if node.kind in PREPARATION and all(i in ready for i in node.inputs):
            ready.append(name)
    algorithms = [n for n in plan.order if plan.nodes[n].kind == "algorithm"
                  and all(i in ready for i in plan.nodes[n].inputs)]
    out: dict[str, Any] = {}
    if not any(plan.nodes[n].kind != "source" for n in ready):
        return out
    scratch = Store(":memory:")
    try:
        sub = Plan(spec=plan.spec, graph=plan.graph.subgraph(ready).copy(), order=ready, nodes=plan.nodes)
        try:
            run = Runner(scratch, registry).run(plan.spec, use_cache=False, plan=sub)
        except AnonflowError as exc:
            exc.run_id = None  # type: ignore[attr-defined]  # the scratch run is not recorded anywhere
            raise
        tables = {s["step"]: s for s in scratch.steps(run.run_id)}
        for name in ready:
            node = plan.nodes[name]
            if node.kind == "typing":
                rec = tables[name]
                summary = dict(rec["summary"] or {})
                notes = summary.pop("notes", [])
                out[name] = {"typing": scratch.get(rec["output_table"]).typing, "summary": summary, "notes": notes}
            elif node.kind == "hierarchy":
                summary = tables[name]["summary"] or {}
                out[name] = {"hierarchies": summary.get("hierarchies", {}), "notes": summary.get("notes", [])}
            elif node.kind == "partition":
                summary = dict(tables[name]["summary"] or {})
                out[name] = {"fragments": {k: summary.get(k) for k in ("fragments", "sizes", "cuts")},
                             "notes": summary.get("notes", [])}
        for name in algorithms:
            node = plan.nodes[name]
            where = plan.spec.where(f"step {name!r}")
            inputs = [scratch.get(tables[i]["output_table"]) for i in node.inputs]
            algo = node.plugin.obj
            try:
                algo.check(node.params, table=inputs[0])
                notes = [str(line) for line in algo.describe_plan(node.params, inputs[0])]
                if FRAGMENT in inputs[0].columns:
                    notes += fragment_plan(algo, node.params, inputs[0], registry, scratch)
            except AnonflowError as exc:
                raise type(exc)(exc.message, where=exc.where or where) from None
            out[name] = {"notes": notes}
        for name in plan.order:
            load = (lambda step: scratch.get(tables[step]["output_table"]))
            if plan.nodes[name].kind == "evaluate":
                _check_metrics(plan, registry, name, ready, load)
            elif plan.nodes[name].kind == "publish":
                _check_publisher(plan, registry, name, ready, load)
    finally:
        scratch.close()
    return out


#: steps that keep the typing of their (first) input: a metric's check may read the typing
#: of the table that goes into them in place of their output, which does not exist at plan time.
KEEPS_TYPING = ("algorithm", "filter", "sample", "partition")


def _typed_upstream(plan: Plan, step: str, ready: list[str]) -> str | None:
    """The previewed step whose typing ``step``'s output keeps (through algorithms, filters,
    samples and partitions), or None."""
    while step not in ready and plan.nodes[step].kind in KEEPS_TYPING and plan.nodes[step].inputs:
        step = plan.nodes[step].inputs[0]
    return step if step in ready else None


def _check_publisher(plan: Plan, registry: Registry, name: str, ready: list[str], load) -> None:
    """Call the publisher's :meth:`~anonflow.api.Plugin.check` of publish step ``name`` with
    ``table=`` (its input, when a preparation step produces it) or ``typed=`` (the previewed
    table whose typing its input keeps), as :func:`_check_metrics` does for metrics."""
    node = plan.nodes[name]
    where = plan.spec.where(f"step {name!r}")
    anon = node.inputs[0]
    if anon in ready:
        tables = {"table": load(anon)}
    else:
        up = _typed_upstream(plan, anon, ready)
        if up is None:
            return
        tables = {"typed": load(up)}
    own, reg, rest = BUILTINS["publish"].validate_all(node.params, registry, where)
    try:
        reg.obj.check(rest, **tables)
    except AnonflowError as exc:
        raise InputError(f"publisher {reg.name!r}: {exc.message}", where=where) from None
    except Exception:  # noqa: BLE001 - a check written for the run's table only; the run will tell
        return


def _check_metrics(plan: Plan, registry: Registry, name: str, ready: list[str], load) -> None:
    """Call the :meth:`~anonflow.api.Plugin.check` of each metric of evaluate step ``name``
    with the tables the preview has: ``original`` (the first of two inputs, when a preparation
    step produces it), ``anonymized`` (when a preparation step produces it), else ``typed``: the
    previewed table the anonymized input is computed from through algorithms, filters and
    samples, which keep its typing -- so requirements on the typing (a sensitive attribute, a
    grading, a label) are reported before anything runs. A check that cannot work with these
    tables (any error other than an anonflow error) is left for the run."""
    node = plan.nodes[name]
    where = plan.spec.where(f"step {name!r}")
    tables: dict[str, Any] = {}
    if len(node.inputs) == 2 and node.inputs[0] in ready:
        tables["original"] = load(node.inputs[0])
    anon = node.inputs[-1]
    if anon in ready:
        tables["anonymized"] = load(anon)
    else:
        up = _typed_upstream(plan, anon, ready)
        if up is not None:
            tables["typed"] = load(up)
    if not tables:
        return
    from .builtins import metric_entries

    for metric, given in metric_entries(node.params["metrics"], where):
        reg = registry.get("metric", metric, where=where)
        try:
            reg.obj.check(validate_params(reg.obj.params, given), **tables)
        except AnonflowError as exc:
            raise InputError(f"metric {metric!r}: {exc.message}", where=where) from None
        except Exception:  # noqa: BLE001 - a check written for the run's tables only; the run will tell
            continue
