"""Running a validated plan against the store, with caching and lineage."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .. import __version__
from .. import egress as egress_policy
from ..api import RunInfo, StepContext, flat_params
from ..cleanup import JOURNAL_PREFIX, LazyJournal, cleanup_on_termination, recover_folder
from ..codehash import engine_digest
from ..errors import AnonflowError, AnonflowWarning, InputError, RunError, StoreError
from ..filemodes import make_ordinary_folder
from ..executor_spec import ExecutorSpec
from ..registry import Registry, get_registry
from ..store import plan_purge, purge
from ..schema import ROW
from ..store import Resources
from ..workflow.model import RETAIN
from ..workflow.spec import WorkflowSpec
from ..steps import SourceRun, StepRun, step_of
from ..store import SCHEMA_VERSION, Artifact, DatabaseError, OutOfMemory, Store
from ..table import TypedTable
from .fingerprint import Fingerprint, step_plugins
from .fragments import FragmentRunning
from .output_checks import check_outputs
from .plan import Node, Plan, build_plan
from .privacy_budget import charges_of, check_budgets, dp_steps

if TYPE_CHECKING:
    from ..egress import Policy


class Reporter:
    """Receives progress events; the CLI subclasses it to draw progress bars."""

    def step_started(self, node: Node, position: int, total: int) -> None: ...

    def step_finished(self, node: Node, status: str, seconds: float) -> None: ...

    def progress(self, total: int, label: str = "") -> Callable[[int], None]:
        return lambda n=1: None


@dataclass
class RunResult:
    run_id: str
    status: str
    workflow: str
    metrics: dict[str, float] = field(default_factory=dict)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    #: what ``retain:`` purged once the run ended: {"retain", "tables", "rows"}
    purged: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"run_id": self.run_id, "status": self.status, "workflow": self.workflow,
               "metrics": self.metrics, "outputs": self.outputs, "steps": self.steps, "error": self.error}
        if self.purged is not None:
            out["purged"] = self.purged
        return out


def _out_of_memory(exc: BaseException) -> str | None:
    """What ran out, if ``exc`` (or what caused it) is running out of memory."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OutOfMemory):
            return "DuckDB could not stay within its memory limit"
        if isinstance(exc, MemoryError):
            return "Python could not allocate memory"
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def step_seed(seed: int, step: str) -> int:
    """The seed of one step: derived from the workflow seed and the step's name."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{step}".encode()).digest()[:8], "little")


def versions(registry: Registry) -> dict[str, Any]:
    import duckdb
    import networkx
    import pluggy
    import pyarrow

    return {
        "anonflow": __version__, "python": platform.python_version(), "duckdb": duckdb.__version__,
        "pyarrow": pyarrow.__version__, "numpy": np.__version__, "networkx": networkx.__version__,
        "pluggy": pluggy.__version__, "store_schema": SCHEMA_VERSION,
        "plugins": {f"{r.kind}:{r.name}": f"{r.distribution} {r.version}" for r in registry},
        # the code itself: a plugin fixed without a version bump still shows (anonflow.codehash)
        "code": {"anonflow": engine_digest(), "plugins": {f"{r.kind}:{r.name}": r.code for r in registry}},
    }


def load_run_info(store: Store, run_id: str, *, upto: int | None = None, current: dict[str, Any] | None = None,
                  workflow_dir: Path | None = None, history: list[dict[str, Any]] | None = None,
                  registry: Registry | None = None) -> RunInfo:
    """A run's record from the store, as :class:`RunInfo`: the steps before position
    ``upto`` (all when None). ``history`` replaces the store's earlier runs (a re-run
    that must see what the original saw)."""
    run = store.run(run_id)
    rid = run["run_id"]
    steps = [s for s in store.steps(rid) if upto is None or s["position"] < upto]
    names = {s["step"] for s in steps}
    metrics = {k: v for k, v in store.metrics(rid).items() if k.split(".", 1)[0] in names}
    thresholds: dict[str, dict[str, float]] = {}
    sources: list[dict[str, Any]] = []
    for s in steps:
        if s["kind"] == "evaluate":
            for key, bound in ((s["params"] or {}).get("thresholds") or {}).items():
                thresholds[f"{s['step']}.{key}"] = dict(bound)
        elif s["kind"] == "source":
            p = dict(s["params"] or {})
            path = p.pop("path", None)
            table = p.pop("table", None)
            inp = (s["inputs"] or [{}])[0]
            cols = [[c, t] for c, t in store.columns(s["output_table"]) if c != ROW] if s["output_table"] else []
            sources.append({"name": s["step"], "format": s["uses"], "path": None if path in (None, "None") else path,
                            "table": table, "options": p, "sha256": inp.get("sha256"), "rows": s["rows"],
                            "columns": cols, "step": s})
    outputs = [o for o in store.outputs(rid) if o["step"] in names]

    def earlier() -> list[dict[str, Any]]:
        if history is not None:
            return [dict(h) for h in history]
        return [{"params": flat_params(store.steps(r["run_id"]), r["seed"]), "metrics": store.metrics(r["run_id"])}
                for r in store.earlier_runs(rid)]

    base = workflow_dir if workflow_dir is not None else Path(run["workflow_path"] or ".").parent
    return RunInfo(run=run, steps=steps, metrics=metrics, thresholds=thresholds, sources=sources, outputs=outputs,
                   current=current, workflow_dir=base, load=store.get,
                   sql=lambda q, params=None, **t: store.sql(q, params, **t), history=earlier,
                   registry=registry if registry is not None else get_registry())


def default_output_dir(spec: WorkflowSpec, given: Path | None = None) -> Path:
    """The output folder: ``--out-dir`` when given, else ``out/`` beside the workflow file."""
    return Path(os.path.abspath(given if given is not None else spec.base_dir / "out"))


class Runner(FragmentRunning):
    """Runs a workflow's plan against a store: each node in order, asking its step
    (:mod:`anonflow.steps`) how; cached results served, every run recorded."""

    def __init__(self, store: Store, registry: Registry | None = None, reporter: Reporter | None = None,
                 history: list[dict[str, Any]] | None = None, resources: Resources | None = None,
                 executor: ExecutorSpec | None = None, egress: "Policy | None" = None) -> None:
        """``history`` stands in for the store's earlier runs of the workflow in
        ``ctx.run_info().history()`` (``anonflow verify --rerun`` hands over what the
        original run saw); ``resources`` and ``executor`` (the CLI's flags) override the
        workflow's; ``egress``: what may leave the process (:mod:`anonflow.egress`; default:
        the policy in force, set by the command that runs)."""
        self.egress = egress
        #: publish steps that write outside the output folder -> their destinations (a
        #: re-run's policy does not replay them: :attr:`not_replayed`)
        self.external: dict[str, list[str]] = {}
        #: the publish steps this run did not replay (their destinations)
        self.not_replayed: dict[str, list[str]] = {}
        self.resources = resources or Resources()
        self.executor_override = executor
        self.executor_spec = ExecutorSpec()
        self._executor = None
        self._out_dir = Path(".")
        self.store = store
        self.registry = registry or get_registry()
        self.reporter = reporter or Reporter()
        self.history = history
        self.output_guard: Any = None
        #: the run's journal (:class:`anonflow.cleanup.Journal`) while it runs
        self.journal: Any = None
        #: the steps that spend differential privacy, and the accounts of the sources they
        #: spend on (anonflow.runner.privacy_budget)
        self.dp: dict[str, Any] = {}
        self.accounts: dict[str, Any] = {}

    def run(self, spec: WorkflowSpec, *, use_cache: bool = True, output_dir: Path | None = None,
            plan: Plan | None = None, retain: str | None = None) -> RunResult:
        """Run every step of ``spec``; raise :class:`AnonflowError` (with ``run_id`` set) on failure.

        SIGTERM and SIGHUP (in the main thread) end the run as Ctrl-C does: the workers are
        killed, every work folder removed and earlier outputs put back before the exception
        (``SystemExit(128 + signal)``) leaves; what a killed run leaves is cleaned up from its
        journal later (:mod:`anonflow.cleanup`).

        ``retain`` (default: the workflow's ``retain:``): what the store keeps of the tables this
        run used once it ends, succeeded or failed (:mod:`anonflow.store.purge`): ``all``;
        ``published``: the sources and intermediate tables are purged and the store rewritten;
        ``none``: the published tables too.

        Every origin and destination the plan names (PostgreSQL sources, publishers that declare
        destinations, a Dask scheduler) is checked against the egress policy before anything
        runs (:func:`anonflow.egress.check_plan`), and the policy stays in force while it runs."""
        policy = self.egress or egress_policy.current()
        with cleanup_on_termination(), self.store.exclusive(), egress_policy.use(policy):
            return self._run(spec, policy, use_cache=use_cache, output_dir=output_dir, plan=plan, retain=retain)

    def _make_out_dir(self, out_dir: Path) -> None:
        """Create the output folder with the modes the user's umask gives (as its published
        files get: the store being open makes new folders owner-only)."""
        missing = []
        folder = Path(os.path.abspath(out_dir))
        while not folder.exists() and folder.parent != folder:
            missing.append(folder)
            folder = folder.parent
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:
                raise InputError(f"cannot create the output folder {out_dir}: {exc.strerror or exc}") from None
            make_ordinary_folder(folder)
        if not out_dir.is_dir():
            raise InputError(f"the output folder {out_dir} is not a folder")

    def _clean_out_dir(self, out_dir: Path) -> None:
        """Clean up after runs that were killed while writing into ``out_dir`` (their journals)."""
        if not out_dir.is_dir():
            return
        for journal, done in recover_folder(out_dir).items():
            run_id = Path(journal).name[len(JOURNAL_PREFIX):-len(".jsonl")]
            self.store.journal_cleaned(run_id, done)  # a run of this store: 'anonflow runs' says it
            if done:
                warnings.warn(f"cleaned up after interrupted run {run_id} in {out_dir}: " + "; ".join(done),
                              AnonflowWarning, stacklevel=4)

    def _run(self, spec: WorkflowSpec, policy: "Policy", *, use_cache: bool, output_dir: Path | None,
             plan: Plan | None, retain: str | None) -> RunResult:
        retain = retain or spec.retain
        if retain not in RETAIN:
            raise InputError(f"retain must be one of {', '.join(RETAIN)}, got {retain!r}")
        plan = plan or build_plan(spec, self.registry)
        self.external = egress_policy.check_plan(plan, self.registry, policy)
        self.not_replayed = {}
        # the privacy budget, before the run begins and before any record is read into the store
        self.dp = dp_steps(plan, self.registry)
        self.accounts = check_budgets(plan, self.dp, self.store)
        self.store.configure(spec.resources.merged(self.resources))
        out_dir = default_output_dir(spec, output_dir)
        self._clean_out_dir(out_dir)
        guard = check_outputs(plan, out_dir, self.store, self.registry)
        self._out_dir = out_dir
        self.executor_spec = spec.executor.merged(self.executor_override)
        if self.executor_spec.address is not None:  # only the person running anonflow names a scheduler
            egress_policy.check_scheduler(self.executor_spec.address, named_by_user=bool(
                self.executor_override and self.executor_override.address == self.executor_spec.address),
                where=spec.where("executor"))
        if self.executor_spec.address and any(step_of(plan.nodes[n]).cuts_fragments for n in plan.order) \
                and any(step_of(plan.nodes[n]).runs_fragments for n in plan.order):
            # a scheduler that cannot be reached fails the run before anything runs
            self._executor_for("--executor" if self.executor_override and self.executor_override.address
                               else spec.where("executor"), journaled=False)
        run_id = self.store.begin_run(workflow=spec.name, path=str(spec.path), text=spec.text,
                                      text_hash=spec.text_hash, seed=spec.seed,
                                      overrides=[list(o) for o in spec.overrides], versions=versions(self.registry))
        self.store.declare_budgets(run_id, [(a.identity, a.name, *a.budget) for a in self.accounts.values()
                                            if a.budget is not None])
        result = RunResult(run_id=run_id, status="running", workflow=spec.name)
        artifacts: dict[str, Artifact] = {}
        name = ""
        self.output_guard = guard  # the same guard checks each path again when it is written
        # what the run creates outside the store is journaled before it is made; the journal
        # (and the output folder) are made when first needed
        def started(journal: Any) -> None:
            self.store.record_journal(run_id, str(journal.path))
            self.store.spill_journaled(journal)

        self.journal = LazyJournal(out_dir, run_id, store=None if self.store.in_memory else
                                   os.path.abspath(self.store.path), before=lambda: self._make_out_dir(out_dir),
                                   after=started)
        guard.journal = self.journal
        finished = False
        try:
            if out_dir.is_dir():
                self.journal.start()
        except BaseException:
            self.journal.close()
            self.store.finish_run(run_id, "failed", "could not start its journal")
            raise
        try:
            for position, name in enumerate(plan.order):
                node = plan.nodes[name]
                self.reporter.step_started(node, position, len(plan.order))
                t0 = time.perf_counter()
                rec = self._run_node(plan, node, position, run_id, artifacts, out_dir, use_cache, result)
                self.reporter.step_finished(node, rec["status"], time.perf_counter() - t0)
                result.steps.append({"step": name, "kind": node.kind, "uses": node.uses, "status": rec["status"],
                                     "rows": rec.get("rows"), "seconds": round(rec.get("seconds") or 0.0, 4),
                                     "notes": (rec.get("summary") or {}).get("notes", [])})
                if (rec.get("summary") or {}).get("suppressed") is not None:
                    result.steps[-1]["suppressed"] = rec["summary"]["suppressed"]
                if (rec.get("summary") or {}).get("perturbs"):  # what a perturbation changed (Algorithm.perturbs)
                    result.steps[-1]["perturbs"] = rec["summary"]["perturbs"]
                if (rec.get("summary") or {}).get("privacy_loss"):  # what it spent (Plugin.privacy_loss)
                    result.steps[-1]["privacy_loss"] = rec["summary"]["privacy_loss"]
            guard.commit()  # a database publisher's transaction commits here (it may fail the run)
            finished = True
        except BaseException as exc:
            try:  # publish all or nothing: what this run wrote goes, earlier files come back
                guard.rollback()
            except OSError as undo:
                sys.stderr.write(f"anonflow: warning: could not restore the files published before this run: {undo}; "
                                 f"what was moved aside is kept in {guard.out_dir}/.anonflow-previous-*\n")
            memory = _out_of_memory(exc)
            if memory is not None:
                exc = RunError(f"out of memory ({memory}); DuckDB's memory limit is {self.store.memory_limit}: "
                               "raise it (resources: {memory: ...} in the workflow, or --memory), or free memory "
                               "on the machine; DuckDB spills to its temp directory (--temp-dir) within the limit",
                               where=spec.where(f"{'source' if name in spec.sources else 'step'} {name!r}"))
            if not isinstance(exc, AnonflowError):
                if isinstance(exc, Exception):
                    err = RunError(f"{type(exc).__name__}: {exc}")
                    err.__cause__ = exc
                    exc = err
                else:  # KeyboardInterrupt: record, then let it propagate untouched
                    self.store.finish_run(run_id, "failed", "interrupted")
                    raise
            self.store.finish_run(run_id, "failed", str(exc))
            result.status = "failed"
            try:
                self._retain(run_id, retain, result)
            except StoreError as not_purged:  # the run's own error is the one to raise
                sys.stderr.write(f"anonflow: warning: {not_purged}\n")
            exc.run_id = run_id  # type: ignore[attr-defined]
            if name and not any(st["step"] == name for st in result.steps) and name in plan.nodes:
                failed = plan.nodes[name]
                result.steps.append({"step": name, "kind": failed.kind, "uses": failed.uses, "status": "failed"})
            exc.steps = result.steps  # type: ignore[attr-defined]  # those that ran, for --json
            raise exc
        finally:
            try:
                self._close_executor(abort=not finished)
            finally:
                self._end_journal(run_id)
        self.store.finish_run(run_id, "succeeded")
        result.status = "succeeded"
        result.metrics = self.store.metrics(run_id)
        result.outputs = [{"path": o["path"], "sha256": o["sha256"], "rows": o["rows"]}
                          for o in self.store.outputs(run_id)]
        self._retain(run_id, retain, result)
        return result

    def _retain(self, run_id: str, retain: str, result: RunResult) -> None:
        """Apply ``retain:`` to this run's tables (the run has ended and is recorded)."""
        if retain == "all":
            return
        try:
            done = purge(self.store, plan_purge(self.store, runs=[run_id], keep=retain))
        except StoreError as exc:  # refused (a store with other names): said with what the run did
            raise StoreError(f"run {run_id} ended ({result.status}), but retain: {retain} did not purge the store: "
                             f"{exc.message}") from None
        except (OSError, DatabaseError) as exc:
            raise StoreError(f"run {run_id} ended ({result.status}), but retain: {retain} could not purge the store "
                             f"{self.store.path}: {exc}; its tables are still there: run 'anonflow purge --run "
                             f"{run_id}'") from None
        result.purged = {"retain": retain, "tables": len(done["tables"]), "rows": done["rows"]}

    # -- one node ------------------------------------------------------------------------

    def _run_node(self, plan: Plan, node: Node, position: int, run_id: str, artifacts: dict[str, Artifact],
                  out_dir: Path, use_cache: bool, result: RunResult) -> dict[str, Any]:
        spec = plan.spec
        step = step_of(node)
        where = spec.where(f"{step.noun} {node.name!r}")
        seed = step_seed(spec.seed, node.name)
        rec: dict[str, Any] = {"step": node.name, "position": position, "kind": node.kind, "uses": node.uses,
                               "plugin_version": node.version, "params": node.params, "seed": seed,
                               "plugins": self._plugins(node)}
        t0 = time.perf_counter()

        if step.loads:  # a source: its records come from outside the store
            artifacts[node.name] = step.load(SourceRun(
                node=node, spec=spec, where=where, rec=rec, run_id=run_id, store=self.store, use_cache=use_cache,
                t0=t0, fingerprint=lambda digests: self._fingerprint(node, digests, seed, spec.base_dir,
                                                                     rec["plugins"])))
            return rec

        inputs = [artifacts[i] for i in node.inputs]
        rec["inputs"] = [{"name": i, "table": a.table, "hash": a.hash} for i, a in zip(node.inputs, inputs)]
        refs = {r: artifacts[r] for r in node.refs}
        fingerprint = self._fingerprint(node, [a.hash for a in inputs] + [f"{r}:{a.hash}" for r, a in refs.items()],
                                        seed, spec.base_dir, rec["plugins"])
        rec["fingerprint"] = fingerprint
        parents = [a.table for a in inputs] + [a.table for a in refs.values()]

        if use_cache and step.cacheable:
            cached = self.store.cached_step(fingerprint)
            if cached is not None:
                rec.update(status="cached", cached_from=cached["run_id"], output_table=cached["output_table"],
                           output_hash=cached["output_hash"], rows=cached["rows"], summary=cached["summary"],
                           seconds=time.perf_counter() - t0)
                if cached["output_table"]:
                    artifacts[node.name] = self.store.artifact(cached["output_table"])
                    self.store.view(f"{spec.name}.{node.name}", cached["output_table"])
                child = cached["output_table"] or f"metrics:{node.name}"
                self.store.record_step(run_id, rec, metrics=cached["metrics"],
                                       lineage=[(p, child) for p in parents])
                return rec

        published_tables: list[tuple[str, str]] = []

        def store_table(name: str, data: Any) -> str:
            art = self.store.put(data, run_id=run_id, step=node.name)
            view = f"{spec.name}.{node.name}.{name}"
            self.store.view(view, art.table)
            published_tables.append((art.table, view))
            return f'steps."{view}"'

        current = {"step": node.name, "kind": node.kind, "uses": node.uses, "plugin_version": node.version,
                   "params": node.params, "seed": seed, "fingerprint": fingerprint, "inputs": rec["inputs"],
                   "position": position}

        def run_record() -> RunInfo:
            return load_run_info(self.store, run_id, upto=position, current=current, workflow_dir=spec.base_dir,
                                 history=self.history, registry=self.registry)

        ctx = StepContext(step=node.name, seed=seed, rng=np.random.default_rng(seed), workflow_dir=spec.base_dir,
                          output_dir=out_dir, sql=self.store_sql, progress=self.reporter.progress,
                          store_table=store_table, run_record=run_record, output_guard=self.output_guard,
                          derive=self.store.derive_table, discard=self.store.discard,
                          relation=self.store.relation, copy_to=self.store.copy_to, registry=self.registry)
        tables = [self.store.get(a.table) for a in inputs]
        ctx.inputs = tables

        def referenced(name: str) -> TypedTable:
            if name not in refs:
                raise InputError(f"table {name!r} is not referenced by this step's parameters (of kind 'step'); "
                                 f"it references {', '.join(map(repr, refs)) or 'none'}", where=where)
            return self.store.get(refs[name].table)

        ctx.tables = referenced
        if node.name in self.dp:
            # charged as the step starts, never taken back: what the step does from here on (its
            # output, its notes, a failure's message) may depend on the data
            self.store.charge(run_id, node.name, charges_of(self.dp[node.name], self.accounts))
        try:
            done = step.execute(StepRun(
                node=node, where=where, ctx=ctx, tables=tables, registry=self.registry, store=self.store,
                run_id=run_id, view=f"{spec.name}.{node.name}", parents=parents,
                keep=lambda typed: self._store_output(node, typed, rec, run_id), fragments=self._run_fragments,
                output_guard=self.output_guard, external=self.external, not_replayed=self.not_replayed))
        except AnonflowError as exc:
            if not exc.where:
                exc = type(exc)(exc.message, where=where)
            self._record_failure(run_id, rec, t0, str(exc))
            raise exc from exc.__cause__
        except Exception as exc:
            who = f"{node.plugin.distribution} {node.version}" if node.plugin else f"anonflow {__version__}"
            err = RunError(f"{node.uses} ({who}) failed: {type(exc).__name__}: {exc}", where=where)
            self._record_failure(run_id, rec, t0, str(err))
            raise err from exc
        summary, failures, outputs = done.summary, done.failures, done.outputs

        if node.name in self.dp:  # the differential-privacy loss the step spent (Plugin.privacy_loss)
            summary["privacy_loss"] = self.dp[node.name].loss
        if ctx.notes:
            summary["notes"] = list(ctx.notes)
        if ctx.fitted:  # what the step fitted to its input (StepContext.record_fitted)
            summary["fitted"] = dict(sorted(ctx.fitted.items()))
        if refs:  # lineage follows them (anonflow.lineage.trace)
            summary["references"] = [{"name": r, "table": a.table, "hash": a.hash} for r, a in refs.items()]
        rec["summary"] = summary or None
        rec["seconds"] = time.perf_counter() - t0
        rec["status"] = "failed" if failures else "succeeded"
        if failures:
            rec["error"] = "; ".join(failures)
        child = rec.get("output_table") or (f"metrics:{node.name}" if step.produces == "metrics" else None)
        edges = [(p, child) for p in parents if child] + done.edges
        edges += [(p, table) for table, _ in published_tables for p in parents]
        for out in outputs:
            edges += [(p, out.path) for p in parents]
        self.store.record_step(run_id, rec, metrics=done.metrics, outputs=[o.to_json() for o in outputs],
                               lineage=edges)
        if rec.get("output_table"):
            self.store.view(f"{spec.name}.{node.name}", rec["output_table"])
            artifacts[node.name] = self.store.artifact(rec["output_table"])
        if failures:
            raise RunError("; ".join(failures), where=where)
        return rec

    def _end_journal(self, run_id: str) -> None:
        """The run has cleaned up after itself (work folders, executor, outputs): DuckDB spills
        to an unjournaled folder again and the journal goes."""
        journal = getattr(self, "journal", None)
        self.journal = None
        if journal is None or journal.journal is None:
            return
        try:
            self.store.spill_journaled(None)
        finally:
            journal.close()
        self.store.journal_cleaned(run_id, [])

    def _store_output(self, node: Node, typed: TypedTable, rec: dict[str, Any], run_id: str) -> None:
        art = self.store.put(typed, run_id=run_id, step=node.name)
        rec.update(output_table=art.table, output_hash=art.hash, rows=art.rows)

    def _record_failure(self, run_id: str, rec: dict[str, Any], t0: float, error: str) -> None:
        rec.update(status="failed", error=error, seconds=time.perf_counter() - t0)
        self.store.record_step(run_id, rec)

    def _fingerprint(self, node: Node, input_hashes: list[str], seed: int, base: Path,
                     plugins: list[dict[str, str]]) -> str:
        """The node's cache key (:class:`~anonflow.runner.fingerprint.Fingerprint`)."""
        return Fingerprint.of(node, input_hashes, seed, base, plugins, self.registry).digest()

    def _plugins(self, node: Node) -> list[dict[str, str]]:
        """:func:`step_plugins` as the step record keeps them (kind, name, version,
        distribution, code digest)."""
        return [r.describe() for r in step_plugins(node, self.registry)]

    def store_sql(self, query: str, params: list[Any] | None = None, **tables: Any) -> Any:
        return self.store.sql(query, params, **tables)
