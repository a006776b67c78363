"""The session: THE run sequence (workflow file -> spec -> plan -> store -> runner), written once.

The CLI (``anonflow run``, ``plan``, ``verify``, ``apply``), the Python API
(:class:`anonflow.Workflow`), :mod:`anonflow.testing`, and the release publisher (through the
engine handle :class:`anonflow.api.Engine` it is given) all go through a :class:`Session`:

* :meth:`Session.load` / :meth:`Session.plan` / :meth:`Session.preview`: a workflow validated,
  its graph built (and what it would reach checked), the preparation steps previewed on the
  data in a throw-away in-memory store (``anonflow plan``);
* :meth:`Session.settings`: the run's resources and executor overrides (``--memory``,
  ``--threads``, ``--temp-dir``, ``--executor``, ``--work-dir``, or the API's arguments);
* :meth:`Session.run`: the run, recorded in the session's store;
* :meth:`Session.load_recorded` / :meth:`Session.rerun`: a recorded workflow re-run
  (``anonflow verify --rerun``);
* :meth:`Session.prepare_batch`, :func:`check_output_folder`, :func:`write_folder`: applying a
  release to new data (``anonflow apply``, docs/releases.md, "Applying a release to new data").

What applying a release takes is split by what knows about it: the engine (here) knows
workflows: :meth:`Session.prepare_batch` runs the steps of a recorded workflow that prepare
the table an algorithm reads (its source, typing, filter, sample and hierarchy steps, with the
recorded seed and ``--set`` values) on the new data instead of the recorded source, in a
throw-away in-memory store, exactly as ``anonflow plan`` previews a workflow; so the new batch
gets the same roles, dropped identifiers, types, missing-value policy and hierarchies (a
missing column, a value outside a hierarchy: the same one-line errors as a run);
:func:`write_folder` writes a result folder all or nothing. The release publisher (a plugin:
it owns the release format) reads the release, finds the files the workflow read, calls the
engine handle, re-checks the claimed privacy models and writes the application's record. The
algorithm (a plugin) maps the new records onto what it published, through its optional
``apply`` method (docs/plugins.md).

The engine imports no plugin: it reaches algorithms and publishers through the registry.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import click
import yaml

from . import egress
from .errors import AnonflowError, InputError
from .executor_spec import ExecutorSpec, executor_spec
from .filemodes import make_ordinary
from .registry import Registry, get_registry
from .store import held, purge_file, trace
from .store import resolve_target as resolve_step
from .runner import Runner, RunResult, load_run_info
from .runner.plan import Plan, build_plan, check_metrics, check_publisher, fragment_plan
from .runner.privacy_budget import check_before_reading, ledger_report
from .schema import FRAGMENT
from .steps import STEPS, step_of
from .store import Store
from .table import TypedTable
from .workflow.spec import (Resources, SourceSpec, WorkflowSpec, apply_recorded_overrides, check_memory, check_threads,
                            load_workflow)

#: the step kinds whose work is redone on the new data (Step.preparation and redone_by_apply: a
#: partition step is not: an applied batch is mapped record by record onto the release, with no fragments)
PREPARATION = tuple(kind for kind, s in STEPS.items() if s.preparation and s.redone_by_apply)
#: new data files apply reads, by extension
NEW_FORMATS = {".csv": "csv", ".tsv": "csv", ".txt": "csv", ".parquet": "parquet", ".pq": "parquet"}


def _passed_through(uses: Any) -> bool:
    """A preparation step apply leaves out (a partition step: the batch is applied record by record)."""
    return isinstance(uses, str) and uses in STEPS and STEPS[uses].preparation and not STEPS[uses].redone_by_apply


def _inputs(step: Any) -> list[str]:
    if not isinstance(step, Mapping):
        return []
    value = step.get("input", ())
    return [value] if isinstance(value, str) else [str(v) for v in value or () if isinstance(v, str)]


def preparation_chain(data: Mapping[str, Any], step: str) -> tuple[str, list[str]]:
    """The one source and the steps (in the workflow's order) that ``step``'s table is made
    from, in the workflow mapping ``data``. Refused (one line) when they include a step that
    is not a preparation step, or read more than one source."""
    steps = data.get("steps") or {}
    sources = data.get("sources") or {}
    seen: list[str] = []
    todo = [step]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.append(name)
        if name in sources:
            continue
        if name not in steps:
            raise InputError(f"the recorded workflow has no step or source {name!r}")
        todo += _inputs(steps[name])
    srcs = [n for n in seen if n in sources]
    if len(srcs) != 1:
        raise InputError(f"step {step!r} of the recorded workflow reads {len(srcs)} sources "
                         f"({', '.join(srcs) or 'none'}); apply takes one new data file in place of one source")
    chain = [n for n in steps if n in seen]
    for name in chain:
        uses = steps[name].get("uses") if isinstance(steps[name], Mapping) else None
        if _passed_through(uses):
            continue  # left out: the batch is applied record by record
        if uses not in PREPARATION:
            raise InputError(f"step {step!r}'s table is made by step {name!r} ({uses}), which is not a preparation "
                             f"step ({', '.join(PREPARATION[1:])}): apply can only redo the preparation on new data")
    return srcs[0], chain


def prepare_batch(workflow_text: str, step: str, new_data: Path, scratch: Path, registry: Any, *,
                  seed: int | None = None, overrides: Iterable[tuple[str, str, Any]] = ()) -> TypedTable:
    """The table step ``step`` of the recorded workflow ``workflow_text`` reads, made from
    ``new_data`` (a CSV or Parquet file) by the recorded preparation steps.

    ``scratch`` is the workflow's folder for this purpose: the files the steps read
    (hierarchy and grading files) must already lie there at their recorded relative paths.
    The workflow is cut down to ``step``'s one source and the preparation steps it is made
    from (a partition step is left out), the source's path is replaced by ``new_data`` (CSV
    options such as the delimiter are kept for a CSV file), ``overrides`` (``--set`` values
    as recorded: ``(step, param, value)``) of those steps are applied, and the steps run in
    a throw-away in-memory store. Returns the prepared table, loaded in memory."""
    new_data = Path(new_data)
    fmt = NEW_FORMATS.get(new_data.suffix.lower())
    if fmt is None:
        raise InputError(f"new data {new_data}: cannot tell its format from its extension; give a .csv or .parquet "
                         "file")
    if not new_data.is_file():
        raise InputError(f"new data {new_data} is not a file")
    try:
        data = yaml.safe_load(workflow_text)
    except yaml.YAMLError as exc:
        raise InputError(f"the recorded workflow text is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, Mapping):
        raise InputError("the recorded workflow text is not a workflow")
    source, chain = preparation_chain(data, step)
    spec = data["sources"][source]
    spec = {"path": spec} if isinstance(spec, str) else dict(spec or {})
    for key in ("path", "db", "table", "format"):
        spec.pop(key, None)
    if fmt != "csv":
        spec = {k: v for k, v in spec.items() if k in ("types", "description")}
    spec["path"] = str(new_data.resolve())
    spec["format"] = fmt
    steps = {}
    for name in chain:
        s = dict(data["steps"][name])
        if _passed_through(s.get("uses")):
            continue
        ins = [i for i in _inputs(s)]
        # a step fed by a left-out partition step reads what the partition step read
        ins = [next(iter(_inputs(data["steps"][i]))) if i in data["steps"] and isinstance(data["steps"][i], Mapping)
               and _passed_through(data["steps"][i].get("uses")) else i for i in ins]
        s["input"] = ins if len(ins) != 1 else ins[0]
        s.pop("after", None)
        steps[name] = s
    cut = {"name": data.get("name", "applied"), "seed": data.get("seed", 0), "sources": {source: spec},
           "steps": steps}
    if not steps:
        raise InputError(f"step {step!r} of the recorded workflow reads its source directly: nothing types it")
    path = scratch / "workflow.yaml"
    path.write_text(yaml.safe_dump(cut, sort_keys=False, allow_unicode=True), encoding="utf-8")
    sets = [f"{s}.{p}={yaml.safe_dump(v, default_flow_style=True, width=1 << 30).strip().removesuffix('...').strip()}"
            for s, p, v in overrides if s in steps]
    prefix = str(scratch.resolve()) + os.sep

    def shown(exc: AnonflowError) -> AnonflowError:
        """The error as the user's: the scratch folder's paths as the recorded ones."""
        where = (exc.where or "").replace(str(path), f"new data {new_data.name}").replace(prefix, "")
        out = type(exc)(exc.message.replace(prefix, ""), where=where or f"new data {new_data.name}")
        return out

    store = Store(":memory:")
    try:
        try:
            session = Session(registry=registry)
            wf = session.load(path, sets, seed)
            # a release's workflow is someone else's: what it reaches is the re-run's policy
            run = session.run(wf, store=store, use_cache=False, plan=session.plan(wf), egress=egress.for_rerun())
        except AnonflowError as exc:
            raise shown(exc) from None
        rec = next(s for s in store.steps(run.run_id) if s["step"] == step)
        table = store.get(rec["output_table"])
        data_in = table.data  # into memory: the scratch store closes below
        if FRAGMENT in data_in.column_names:
            data_in = data_in.drop_columns([FRAGMENT])
        return TypedTable(data_in, table.typing, table.claims, table.hierarchies)
    finally:
        store.close()


def check_output_folder(out: Path) -> None:
    """``out`` may be written: it does not exist, or is an empty folder (not a link)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise InputError(f"output {out} exists and is not a folder; anonflow never writes over a file: choose another "
                         "path with -o")
    if out.is_dir() and any(out.iterdir()):
        raise InputError(f"output folder {out} exists and is not empty; anonflow never writes over it: remove it or "
                         "choose another path with -o")
    if not out.parent.is_dir():
        raise InputError(f"the folder {out.parent} of output {out} does not exist")


def write_folder(out: Path, write: Callable[[Path], None]) -> None:
    """Write the folder ``out`` all or nothing: ``write(tmp)`` fills a temporary folder
    beside it (``.NAME.tmp-PID``), which is renamed to ``out`` once complete; any failure
    removes it and leaves nothing at ``out`` (an empty folder that was there stays)."""
    check_output_folder(out)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o700)
    try:
        write(tmp)
        make_ordinary(tmp)  # published: the modes the user's umask gives (not a store's owner-only ones)
        check_output_folder(out)  # nothing appeared there meanwhile
        if out.is_dir():
            out.rmdir()
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# -- the session ---------------------------------------------------------------------------

class TerminalProgress:
    """Step lines and progress bars on stderr (a :class:`~anonflow.runner.Reporter`): the
    CLI's when stderr is a terminal, the Python API's with ``progress=True``; quiet when not
    ``enabled``."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def step_started(self, node: Any, position: int, total: int) -> None:
        if self.enabled:
            click.echo(f"[{position + 1}/{total}] {node.name} ({node.uses}) ...", err=True)

    def step_finished(self, node: Any, status: str, seconds: float) -> None:
        if self.enabled:
            click.echo(f"      {status} in {seconds:.2f}s", err=True)

    def progress(self, total: int, label: str = "") -> Callable[..., None]:
        if not self.enabled or total <= 0:
            return lambda n=1: None
        bar = click.progressbar(length=total, label=f"      {label}", file=sys.stderr, show_eta=True, show_pos=True)
        bar.__enter__()
        state = {"done": 0}

        def advance(n: int = 1) -> None:
            state["done"] += n
            bar.update(n)
            if state["done"] >= total:
                bar.__exit__(None, None, None)
        return advance


@dataclass
class Rerun:
    """What :meth:`Session.rerun` returns: the run's :class:`~anonflow.runner.RunResult`, and
    the steps the re-run's egress policy did not replay (step name -> what they would have
    written outside the re-run's scratch folder)."""

    result: RunResult
    not_replayed: dict[str, list[str]] = field(default_factory=dict)


class Session:
    """The engine, for one store and one plugin registry: THE run sequence (spec -> plan ->
    store -> runner) that the CLI, the Python API, :mod:`anonflow.testing` and the release
    publisher (as its :class:`anonflow.api.Engine`) all call.

    ``db``: the store file (``":memory:"``: an in-memory store, the default); ``registry``:
    the plugins (default: the process's, :func:`anonflow.registry.get_registry`);
    ``reporter``: the runs' step lines and progress (:class:`TerminalProgress`, or None)."""

    def __init__(self, db: str | os.PathLike[str] = ":memory:", registry: Registry | None = None, *,
                 reporter: Any = None) -> None:
        self.db = os.fspath(db)
        self._registry = registry
        self.reporter = reporter

    @property
    def registry(self) -> Registry:
        """The plugins the session runs with (the process's registry, looked up on first use,
        unless one was given)."""
        if self._registry is None:
            self._registry = get_registry()
        return self._registry

    # -- a workflow and its plan -------------------------------------------------------------

    def load(self, workflow: str | os.PathLike[str], overrides: Iterable[str] = (),
             seed: int | None = None) -> WorkflowSpec:
        """The workflow file at ``workflow``, validated, with ``--set`` ``overrides`` and
        ``--seed`` applied (:func:`anonflow.workflow.spec.load_workflow`)."""
        return load_workflow(workflow, list(overrides), seed)

    def load_recorded(self, workflow: str | os.PathLike[str], *, seed: int | None = None,
                      overrides: Iterable[Any] = ()) -> WorkflowSpec:
        """A recorded workflow (a release's, written to ``workflow``) with the recorded run's
        ``seed`` and ``--set`` values (``(step, param, value)``) applied as that run applied
        them (:func:`anonflow.workflow.spec.apply_recorded_overrides`)."""
        return apply_recorded_overrides(load_workflow(Path(workflow), (), seed), overrides)

    def plan(self, spec: WorkflowSpec, *, policy: egress.Policy | None = None) -> Plan:
        """The plan (graph, order, plugins) of ``spec``; with ``policy``, what it would reach
        is checked against it as a run would (:func:`anonflow.egress.check_plan`). A run that
        would spend more differential privacy than a source's ``budget:`` allows, with what the
        session's store has recorded, is refused first, before any source is read
        (:func:`anonflow.runner.privacy_budget.check_before_reading`)."""
        if spec.budgets:
            with self._ledger() as ledger:
                check_before_reading(spec, self.registry, ledger)
        plan = build_plan(spec, self.registry)
        if policy is not None:
            egress.check_plan(plan, self.registry, policy)
        return plan

    @contextlib.contextmanager
    def _ledger(self) -> Iterator[Store | None]:
        """The session's store opened read-only for its privacy ledger, or None where there is
        none to read (an in-memory store, no file yet, a file another process is writing: the
        run checks again under the store's lock)."""
        if self.db == ":memory:" or not os.path.exists(self.db):
            yield None
            return
        try:
            store = Store(self.db, read_only=True)
        except AnonflowError:
            yield None
            return
        with store:
            yield store

    def preview(self, plan: Plan) -> dict[str, Any]:
        """What ``anonflow plan`` shows beyond the parameters, computed on the data in a
        throw-away in-memory store (nothing is written anywhere).

        The preparation steps (sources, typing, filter, sample, hierarchy, partition) whose
        inputs are all preparation steps are run; their errors (a hierarchy missing a value, a
        bad grading...) surface here, before anything runs for real. Returns, per step name:
        for a typing step, ``{"typing", "summary", "notes"}``; for a hierarchy step,
        ``{"hierarchies", "notes"}`` (each column's builder, height and distinct values per
        level); for a partition step, ``{"fragments", "notes"}``; for an algorithm fed by
        preparation steps only, its :meth:`~anonflow.api.Algorithm.check` has passed and
        ``{"notes": [...]}`` holds its :meth:`~anonflow.api.Algorithm.describe_plan` lines
        (the lattice's size, for one). Each evaluate step's metrics and each publish step's
        publisher are checked against the previewed tables: a metric needing a grading or a
        label the typing lacks fails the plan."""
        registry = self.registry
        ready: list[str] = []
        for name in plan.order:
            node = plan.nodes[name]
            if step_of(node).preparation and all(i in ready for i in node.inputs):
                ready.append(name)
        algorithms = [n for n in plan.order if step_of(plan.nodes[n]).runs_fragments
                      and all(i in ready for i in plan.nodes[n].inputs)]
        out: dict[str, Any] = {}
        if not any(not step_of(plan.nodes[n]).loads for n in ready):
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
                rec = tables[name]
                shown = step_of(plan.nodes[name]).preview(dict(rec["summary"] or {}),
                                                          lambda rec=rec: scratch.get(rec["output_table"]))
                if shown is not None:
                    out[name] = shown
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
                if step_of(plan.nodes[name]).produces == "metrics":
                    check_metrics(plan, registry, name, ready, load)
                elif step_of(plan.nodes[name]).produces == "files":
                    check_publisher(plan, registry, name, ready, load)
        finally:
            scratch.close()
        return out

    # -- running ---------------------------------------------------------------------------

    @staticmethod
    def settings(*, memory: str | None = None, threads: int | None = None, temp_dir: Path | None = None,
                 executor: str | Mapping[str, Any] | None = None, work_dir: Path | None = None,
                 spec: WorkflowSpec | None = None,
                 names: Mapping[str, str] | None = None) -> tuple[Resources, ExecutorSpec | None]:
        """The resources and executor a run is given over the workflow's own (the CLI's
        ``--memory``, ``--threads``, ``--temp-dir``, ``--executor``, ``--work-dir``; the
        Python API's arguments of those names), checked; errors name the option as ``names``
        (``{"memory": "--memory", ...}``) spells it. ``temp_dir`` and ``work_dir`` are made
        absolute (the caller resolves them as it says they are resolved); ``work_dir`` over
        ``spec``'s executor when no ``executor`` is given."""
        names = {"memory": "memory", "threads": "threads", "executor": "executor", **(names or {})}
        resources = Resources(check_memory(memory, names["memory"]) if memory is not None else None,
                              check_threads(threads, names["threads"]) if threads is not None else None,
                              Path(os.path.abspath(temp_dir)) if temp_dir is not None else None)
        chosen = (executor_spec(dict(executor) if isinstance(executor, Mapping) else executor, names["executor"],
                                Path.cwd()) if executor is not None else None)
        if work_dir is not None:
            base = chosen or (spec.executor if spec is not None else ExecutorSpec())
            chosen = ExecutorSpec(base.kind, base.workers, base.address, os.path.abspath(work_dir))
        return resources, chosen

    def open_store(self, *, read_only: bool = False) -> Store:
        """The session's store, opened (a context manager; close it)."""
        return Store(self.db, read_only=read_only)

    def run(self, spec: WorkflowSpec, *, plan: Plan | None = None, store: Store | None = None,
            use_cache: bool = True, output_dir: Path | None = None, retain: str | None = None,
            resources: Resources | None = None, executor: ExecutorSpec | None = None,
            history: list[dict[str, Any]] | None = None, egress: egress.Policy | None = None) -> RunResult:
        """Run ``spec`` (its ``plan``, built when not given) and record it in ``store``
        (default: the session's store, opened and closed around the run); the other
        arguments are :class:`~anonflow.runner.Runner`'s and :meth:`~anonflow.runner.Runner.run`'s."""
        return self._run(spec, plan=plan, store=store, use_cache=use_cache, output_dir=output_dir, retain=retain,
                         resources=resources, executor=executor, history=history, policy=egress)[0]

    def _run(self, spec: WorkflowSpec, *, plan: Plan | None, store: Store | None, use_cache: bool,
             output_dir: Path | None, retain: str | None, resources: Resources | None,
             executor: ExecutorSpec | None, history: list[dict[str, Any]] | None,
             policy: egress.Policy | None) -> tuple[RunResult, Runner]:
        plan = plan if plan is not None else self.plan(spec)
        with contextlib.ExitStack() as stack:
            if store is None:
                store = stack.enter_context(self.open_store())
            runner = Runner(store, self.registry, self.reporter, history=history, resources=resources,
                            executor=executor, egress=policy)
            result = runner.run(spec, use_cache=use_cache, output_dir=output_dir, plan=plan, retain=retain)
        return result, runner

    # -- what the store records -------------------------------------------------------------

    def runs(self, limit: int) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any] | None]:
        """The newest ``limit`` runs, each with the confidential data it left in the store
        (``held_tables``, ``held_records``, ``purged_tables``); what the store holds in all
        (:func:`anonflow.store.held`); the interrupted purge pending, if any."""
        with self.open_store(read_only=True) as store:
            rows = store.runs(limit)
            h = held(store)
            for r in rows:  # the confidential data (sources, intermediate tables) each run left in the store
                mine = h["runs"].get(r["run_id"], {})
                r["held_tables"], r["held_records"] = mine.get("tables", 0), mine.get("rows", 0)
                r["purged_tables"] = mine.get("purged", 0)
            return rows, h, store.pending_purge()

    def run_record(self, run_id: str) -> dict[str, Any]:
        """One recorded run (an id, a prefix, or ``latest``): ``{"run", "steps", "metrics", "outputs"}``."""
        with self.open_store(read_only=True) as store:
            run_rec = store.run(run_id)
            rid = run_rec["run_id"]
            return {"run": run_rec, "steps": store.steps(rid), "metrics": store.metrics(rid),
                    "outputs": store.outputs(rid)}

    def held_line(self, store: Store) -> str | None:
        """One line on the confidential data ``store`` holds (None if it holds none)."""
        h = held(store)
        if not h["tables"]:
            return None
        return (f"the store {store.path} holds {h['tables']} table(s) of original or intermediate records "
                f"({h['rows']} records in all): 'anonflow purge --all' removes them and keeps the lineage (or set "
                "retain: published in the workflow)")

    def budgets(self, source: str | None = None) -> list[dict[str, Any]]:
        """The privacy ledger per source (or the one ``source`` names): budget, spent, left
        (:func:`anonflow.runner.privacy_budget.ledger_report`)."""
        with self.open_store(read_only=True) as store:
            return ledger_report(store, source)

    def lineage(self, target: str, run_id: str | None = None) -> list[tuple[int, dict[str, Any]]]:
        """What produced ``target`` (a step, a store table, a published file), back to the sources."""
        with self.open_store(read_only=True) as store:
            return trace(store, target, run_id)

    def report(self, run_id: str, render: Callable[[Any], str]) -> tuple[Any, str]:
        """The page ``render`` (a release publisher's ``report``) writes of a recorded run, from
        the :class:`~anonflow.api.RunInfo` a release's report shows (up to the run's release
        step, as that step saw it, when it has one), while the store is open (the info reads
        its tables); returns the info and the page."""
        with self.open_store(read_only=True) as store:
            rid = store.run(run_id)["run_id"]
            steps = store.steps(rid)
            rel = next((s for s in steps
                        if s["kind"] == "publish" and (s["params"] or {}).get("publisher") == "release"), None)
            current = None
            if rel is not None:
                current = {k: rel[k] for k in ("step", "kind", "uses", "plugin_version", "params", "seed",
                                               "fingerprint", "inputs", "position")}
            info = load_run_info(store, rid, upto=rel["position"] if rel else None, current=current)
            return info, render(info)

    def hierarchies(self, target: str, run_id: str | None = None) -> dict[str, Any] | None:
        """The hierarchies attached to ``target`` (a store table, or a step: of ``run_id``, by
        default of the latest run with it); None when it produced no table."""
        with self.open_store(read_only=True) as store:
            table_name = target if store.artifact(target) else (resolve_step(store, target, run_id).get("output_table"))
            if not table_name:
                return None
            return store.get(table_name).hierarchies

    def purge(self, **options: Any) -> dict[str, Any]:
        """Purge the session's store file (:func:`anonflow.store.purge_file`'s options)."""
        return purge_file(self.db, **options)

    # -- the engine handle of the release publisher (anonflow.api.Engine) -------------------

    def rerun(self, spec: WorkflowSpec, *, db: Path, out: Path, history: list[dict[str, Any]] | None = None,
              egress: egress.Policy | None = None) -> Rerun:
        """Re-run a recorded workflow (from :meth:`load_recorded`) without the step cache into
        the store file ``db`` and the output folder ``out``, under the egress ``policy`` (whose
        plan is built under it too); ``history``: the recorded sweep points. Returns the
        run's result and the steps not replayed."""
        with (egress_use(egress) if egress is not None else contextlib.nullcontext()):
            session = Session(db, self.registry)
            result, runner = session._run(spec, plan=session.plan(spec), store=None, use_cache=False,
                                          output_dir=out, retain=None, resources=None, executor=None,
                                          history=history, policy=egress)
        return Rerun(result, dict(runner.not_replayed))

    @staticmethod
    def rerun_policy() -> egress.Policy:
        """The egress policy of a re-run: the one in force if it is a re-run's (``anonflow
        verify`` sets it from ``--allow-host``), else a re-run's with the hosts the policy in
        force names (anonflow.egress)."""
        current = egress.current()
        if not current.replay_external and current.credentials == "named":
            return current
        return egress.Policy(current.named, credentials="named", replay_external=False)

    def read_source(self, source: SourceSpec, db: Path, *, egress: egress.Policy | None = None) -> tuple[str, int]:
        """Read ``source`` (of a spec from :meth:`load_recorded`) into the scratch store file
        ``db`` as a run would, under the egress policy ``egress``, and return its content hash
        and record count (a re-run's check that a database source still returns what was
        recorded)."""
        with (egress_use(egress) if egress is not None else contextlib.nullcontext()), Store(db) as store:
            art = source.kind.load(store, source, run_id="verify")
            return art.hash, art.rows

    @contextlib.contextmanager
    def scratch_sql(self) -> Iterator[Callable[..., Any]]:
        """A throw-away in-memory store's ``sql(query, params=None, **tables)`` for the ``with``
        block (a step context's ``sql`` outside a run)."""
        with Store(":memory:") as store:
            yield lambda query, params=None, **tables: store.sql(query, params, **tables)

    def prepare_batch(self, workflow_text: str, step: str, new_data: Path, scratch: Path, *,
                      seed: int | None = None, overrides: Iterable[tuple[str, str, Any]] = ()) -> TypedTable:
        """:func:`prepare_batch` with the session's registry."""
        return prepare_batch(workflow_text, step, new_data, scratch, self.registry, seed=seed, overrides=overrides)

    check_output_folder = staticmethod(check_output_folder)
    write_folder = staticmethod(write_folder)


egress_use = egress.use
