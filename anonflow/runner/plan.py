"""Building and validating the workflow graph.

:func:`build_plan` turns a :class:`~anonflow.workflow.spec.WorkflowSpec` into a networkx DiGraph of
sources and steps and rejects, before anything runs: unknown plugins (with "did you
mean"), missing inputs, cycles (naming the cycle), steps fed the wrong kind of input, bad
parameters, and columns that do not exist in the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from .. import __version__
from ..api import StepContext
from ..errors import AnonflowError, InputError, WorkflowError
from ..params import metric_entries, suggest, validate_params
from ..registry import Registered, Registry
from ..schema import ROW
from ..sourcekind import SourceSpec
from ..sources import describe_source
from ..steps import BUILTINS, StaticInput, step_of
from ..workflow.spec import WorkflowSpec
from .fragments import describe_sizes, fragment_groups


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
        node.refs = tuple(dict.fromkeys(step_of(node).references(node, step.params, registry, where)))
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
        # sources first; publishing last, so that evaluation (and its thresholds) gate it
        index = spec.steps[n].index if n in spec.steps else list(spec.sources).index(n)
        return (step_of(nodes[n]).stage, index)

    order = list(nx.lexicographical_topological_sort(graph, key=priority))
    order = [n for n in order if not step_of(nodes[n]).only_when_read or graph.out_degree(n) > 0]

    for n in order:
        node = nodes[n]
        step = step_of(node)
        if step.loads:
            if check_columns:
                node.columns = (ROW, *[c for c, _ in _describe(spec, node.source)])
            continue
        where = spec.where(f"step {n!r}")
        ins = [nodes[i] for i in node.inputs]
        lo, hi = step.input_range(node)
        if not lo <= len(ins) <= hi:
            want = f"{lo}" if lo == hi else f"{lo} to {hi}"
            raise WorkflowError(f"{node.uses} takes {want} input(s), got {len(ins)}", where=where)
        for i in [*ins, *(nodes[r] for r in node.refs)]:
            if i.produces != "table":
                raise WorkflowError(f"input {i.name!r} is a {i.uses} step and produces no table", where=where)
        static = [StaticInput(i.name, i.columns, i.typed) for i in ins]
        step.plan(node, spec.steps[n].params, static, registry, where, spec.base_dir)
    return Plan(spec=spec, graph=graph, order=order, nodes=nodes)


def fragment_plan(algo: Any, params: dict[str, Any], table: Any, registry: Registry, store: Any) -> list[str]:
    """What ``anonflow plan`` says of an algorithm fed by a partitioned table: how it will
    run on the fragments, and which fragments it merges with neighbours first."""
    if algo.summarizes(params):
        return [f"{algo.name}: each fragment's summary is computed where it lies and summed; then one run on "
                "the whole table"]
    if not algo.per_fragment:
        return [f"{algo.name} does not run per fragment: it runs on the whole table"]
    ctx = StepContext(step="plan", seed=0, rng=None, workflow_dir=Path("."), output_dir=Path("."),  # type: ignore
                      sql=lambda q, p=None, **t: store.sql(q, p, **t), derive=store.derive_table,
                      discard=store.discard, registry=registry)
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
    :meth:`anonflow.session.Session.preview`, its typing (a typing step) or its notes and fragments."""
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




def _typed_upstream(plan: Plan, step: str, ready: list[str]) -> str | None:
    """The previewed step whose typing ``step``'s output keeps (through algorithms, filters,
    samples and partitions), or None."""
    # steps that keep the typing of their (first) input (Step.keeps_typing): a metric's check may
    # read the typing of the table that goes into them in place of their output, which does not
    # exist at plan time
    while step not in ready and step_of(plan.nodes[step]).keeps_typing and plan.nodes[step].inputs:
        step = plan.nodes[step].inputs[0]
    return step if step in ready else None


def check_publisher(plan: Plan, registry: Registry, name: str, ready: list[str], load) -> None:
    """Call the publisher's :meth:`~anonflow.api.Plugin.check` of publish step ``name`` with
    ``table=`` (its input, when a preparation step produces it) or ``typed=`` (the previewed
    table whose typing its input keeps), as :func:`check_metrics` does for metrics."""
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
    own, reg, rest = step_of(node).validate_all(node.params, registry, where)
    try:
        reg.obj.check(rest, **tables)
    except AnonflowError as exc:
        raise InputError(f"publisher {reg.name!r}: {exc.message}", where=where) from None
    except Exception:  # noqa: BLE001 - a check written for the run's table only; the run will tell
        return


def check_metrics(plan: Plan, registry: Registry, name: str, ready: list[str], load) -> None:
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
    for metric, given in metric_entries(node.params["metrics"], where):
        reg = registry.get("metric", metric, where=where)
        try:
            reg.obj.check(validate_params(reg.obj.params, given), **tables)
        except AnonflowError as exc:
            raise InputError(f"metric {metric!r}: {exc.message}", where=where) from None
        except Exception:  # noqa: BLE001 - a check written for the run's tables only; the run will tell
            continue
