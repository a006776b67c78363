"""What every kind of workflow node is: a :class:`Step`, with its properties as attributes.

A step kind (a source, ``typing``, ``filter``, an algorithm, ``publish``...) says here what the
plan and the run loop need to know of it -- whether its result may be served from the cache,
whether it prepares the table an algorithm reads, whether its output keeps its input's typing
-- and how it runs (:meth:`Step.execute`). The plan (:mod:`anonflow.runner.plan`) and the run
loop (:mod:`anonflow.runner.loop`) ask the step; they hold no lists of kinds. Each kind is one
module of this package, registered in :data:`anonflow.steps.STEPS`.

Steps never import the runner: what a step needs of the run loop (the store, the registry,
the executor for a partitioned table, the output guard) is handed over in :class:`StepRun`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..api import Output, StepContext
from ..errors import WorkflowError
from ..params import Param, ParamError, validate_params
from ..table import TypedTable


@dataclass(frozen=True)
class StaticInput:
    """What planning knows about an input table before anything runs."""

    name: str
    columns: tuple[str, ...] | None  # None: unknown until run time
    typed: bool


@dataclass
class StepRun:
    """What the run loop hands a step that reads tables of the store (:meth:`Step.execute`)."""

    node: Any  # the plan's node (anonflow.runner.plan.Node): name, uses, params, plugin, version
    where: str  # the step, as messages name it
    ctx: StepContext
    tables: list[TypedTable]  # the input tables, in order
    registry: Any
    store: Any  # the run's anonflow.store.Store
    run_id: str
    #: the step's output view: ``{workflow}.{step}``
    view: str
    #: the step's table into the store as its output (the step record's output table)
    keep: Callable[[TypedTable], None]
    #: the tables the step reads (inputs, then references): lineage runs from them
    parents: list[str] = field(default_factory=list)
    #: runs an algorithm on a partitioned table on the run's executor:
    #: ``fragments(node, table, ctx, where) -> TypedTable``
    fragments: Callable[..., TypedTable] | None = None
    #: the run's output guard (:class:`anonflow.outputs.OutputGuard`)
    output_guard: Any = None
    #: publish steps writing outside the output folder -> their destinations; a step not
    #: replayed records itself in ``not_replayed``
    external: Mapping[str, list[str]] = field(default_factory=dict)
    not_replayed: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class StepOutput:
    """What a step's run gives back beyond its output table (given to :attr:`StepRun.keep`)."""

    summary: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    #: failed checks (privacy checks, thresholds): the step is recorded, then the run fails
    failures: list[str] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)
    #: lineage edges beyond parents -> output table (a table of suppressed records)
    edges: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class SourceRun:
    """What the run loop hands a step that reads records from outside the store
    (:meth:`Step.load`)."""

    node: Any
    spec: Any  # the WorkflowSpec (its where(), for an error of the source)
    where: str
    rec: dict[str, Any]  # the step record so far; the step completes and records it
    run_id: str
    store: Any
    use_cache: bool
    t0: float
    #: the node's fingerprint over the given input digests
    fingerprint: Callable[[list[str]], str]


class Step:
    """A kind of node of a workflow. Subclasses set the attributes and implement
    :meth:`execute` (or :meth:`load`)."""

    #: the kind, as step records store it
    kind: str = ""
    #: what ``uses:`` names in a workflow file to get this step; "" when it is named otherwise
    #: (a source by its format, an algorithm by its plugin's name)
    uses: str = ""
    #: how messages name a node of this kind ("source 'x'" or "step 'x'")
    noun: str = "step"
    produces: str = "table"  # table | metrics | files
    min_inputs: int = 1
    max_inputs: int = 1
    params: tuple[Param, ...] = ()
    description: str = ""
    #: where the plan puts it among steps the graph leaves free: 0 first (sources), 1, 2 last
    #: (publishing, so that evaluation and its thresholds gate it)
    stage: int = 1
    #: run only when a step reads it (a source nobody reads is left out of the plan)
    only_when_read: bool = False
    #: reads records from outside the store: the run loop calls :meth:`load`, not :meth:`execute`
    loads: bool = False
    #: a run with the same fingerprint may be served from the store instead of run again
    cacheable: bool = False
    #: prepares the table an algorithm reads: ``anonflow plan`` runs it on the data (in memory)
    #: to show what the algorithms will face
    preparation: bool = False
    #: ``anonflow apply`` redoes it on a new batch (a preparation step whose work is not
    #: redone is passed through: the batch is mapped record by record)
    redone_by_apply: bool = False
    #: its output is typed whatever its input (it gives the typing)
    makes_typing: bool = False
    #: its output has the typing of its first input (a metric's plan-time check may read that)
    keeps_typing: bool = False
    #: cuts its table into fragments
    cuts_fragments: bool = False
    #: runs per fragment of a partitioned input, on the run's executor
    runs_fragments: bool = False

    # -- planning ------------------------------------------------------------------------

    def check_params(self, given: Mapping[str, Any], registry: Any, where: str,
                     base_dir: Path | None = None) -> dict[str, Any]:
        """Validate the step's ``with:`` block; return it with defaults filled in (and files
        it names resolved to their content, so fingerprints see a changed file)."""
        try:
            return validate_params(self.params, given)
        except ParamError as exc:
            raise WorkflowError(str(exc), where=where) from None

    def validate(self, params: dict[str, Any], inputs: Sequence[StaticInput], registry: Any,
                 where: str) -> tuple[str, ...] | None:
        """Static checks; return the output columns if known."""
        return None

    def input_range(self, node: Any) -> tuple[int, int]:
        """How many inputs the node takes: (least, most)."""
        return self.min_inputs, self.max_inputs

    def plan(self, node: Any, given: Mapping[str, Any], inputs: Sequence[StaticInput], registry: Any, where: str,
             base_dir: Path | None = None) -> None:
        """Check the node before anything runs and set its ``params``, ``columns`` and ``typed``."""
        node.params = self.check_params(given, registry, where, base_dir)
        node.columns = self.validate(node.params, inputs, registry, where)
        node.typed = self.typed(inputs)

    def typed(self, inputs: Sequence[StaticInput]) -> bool:
        """Whether the node's output is a typed table."""
        return self.makes_typing or (self.keeps_typing and bool(inputs) and inputs[0].typed)

    def references(self, node: Any, given: Any, registry: Any, where: str) -> list[str]:
        """The tables the step's plugins name by parameters of kind ``step``, read from the
        parameters as written (they are validated later)."""
        return []

    def fingerprint_params(self, node: Any, registry: Any) -> dict[str, Any]:
        """The parameters that count in the node's fingerprint."""
        return node.params

    def read_params(self, node: Any, registry: Any) -> dict[str, Any]:
        """The parameters that may name files the workflow reads (hierarchy, grading files)."""
        return node.params

    # -- running -------------------------------------------------------------------------

    def execute(self, run: StepRun) -> StepOutput:
        """Run the step on its input tables; its output table goes to :attr:`StepRun.keep`."""
        raise NotImplementedError(f"step kind {self.kind!r} reads no tables")

    def load(self, run: SourceRun) -> Any:
        """Bring the node's records into the store and record the step; return its artifact."""
        raise NotImplementedError(f"step kind {self.kind!r} reads tables of the store")

    def preview(self, summary: dict[str, Any], output: Callable[[], TypedTable]) -> dict[str, Any] | None:
        """What ``anonflow plan`` shows of this step once previewed (its recorded summary and
        its output table), or None."""
        return None
