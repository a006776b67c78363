"""Running a validated plan against the store, with caching and lineage."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import __version__
from . import egress as egress_policy
from .api import Output, RunInfo, StepContext, file_sha256, flat_params, suppression_limit
from .builtins import BUILTINS
from .dag import Node, Plan, build_plan
from .errors import AnonflowError, InputError, PluginError, RunError, StoreError
from .lineage import canonical_json
from .codehash import engine_digest
from .plugins import Registered, Registry, get_registry
from .executors import (Executor, ExecutorSpec, FragmentResult, FragmentTask, WorkFolder, run_all,
                        start_executor)
from .fragments import describe_sizes, fragment_groups, keep_classes_together, merge_neighbours
from .schema import CLASS, FRAGMENT, ROW
from .spec import RETAIN, Resources, WorkflowSpec
from .store import SCHEMA_VERSION, Artifact, DatabaseError, OutOfMemory, Store, duckdb_file, ident
from .outputs import inside
from .params import ParamError, validate_params
from .table import ColumnDomain, TypedTable

if TYPE_CHECKING:
    from .egress import Policy
    from .outputs import OutputGuard


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


def _shown(destination: str) -> str:
    """A destination for a message: a PostgreSQL URL as ``postgresql://user@host:port/db``."""
    if destination.split("://", 1)[0].lower() in ("postgresql", "postgres"):
        from .postgres import display

        return f"postgresql://{display(destination)}"
    return destination


def step_seed(seed: int, step: str) -> int:
    """The seed of one step: derived from the workflow seed and the step's name."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{step}".encode()).digest()[:8], "little")


def _duckdb_int(kind: pa.DataType) -> str:
    """The DuckDB name of an Arrow integer type (a ``_class`` column keeps its type)."""
    names = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INTEGER", pa.uint8(): "UTINYINT",
             pa.uint16(): "USMALLINT", pa.uint32(): "UINTEGER", pa.uint64(): "UBIGINT"}
    return names.get(kind, "BIGINT")


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


def step_plugins(node: Node, registry: Registry) -> list[Registered]:
    """The plugins whose code a step runs: an algorithm's own plugin and the privacy metrics
    of its claims; and every registered plugin a step's parameters name (keys or values, at
    any depth): an evaluate step's metrics, a publisher, hierarchy builders, the lattice's
    model and utility metrics. A value that merely looks like a plugin's name adds that plugin
    too, which can only make the fingerprint stricter."""
    found: dict[tuple[str, str], Registered] = {}
    if node.plugin is not None:
        found[(node.plugin.kind, node.plugin.name)] = node.plugin
        try:
            claimed = list(node.plugin.obj.claims(node.params) or {})
        except Exception:  # noqa: BLE001 - the run reports a broken claims(); here it only adds names
            claimed = []
        for name in claimed:
            if registry.has("metric", str(name)):
                found[("metric", str(name))] = registry.get("metric", str(name))
    if node.kind == "source":
        return list(found.values())
    names: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            names.add(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(k)
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    walk(node.params)
    for reg in registry:
        if reg.name in names and reg.kind != "algorithm":
            found[(reg.kind, reg.name)] = reg
    return [found[k] for k in sorted(found)]


def relative_paths(value: Any, base: Path) -> Any:
    """``value`` with every string naming an existing absolute path rewritten relative to
    ``base`` (recursively through lists and mappings): parameters that name files (hierarchy
    files, gradings) then read the same wherever the workflow's folder is."""
    if isinstance(value, str):
        if len(value) > 1 and os.path.isabs(value) and os.path.exists(value):
            return os.path.relpath(value, base)
        return value
    if isinstance(value, dict):
        return {k: relative_paths(v, base) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [relative_paths(v, base) for v in value]
    return value


def load_run_info(store: Store, run_id: str, *, upto: int | None = None, current: dict[str, Any] | None = None,
                  workflow_dir: Path | None = None, history: list[dict[str, Any]] | None = None) -> RunInfo:
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
                   sql=lambda q, params=None, **t: store.sql(q, params, **t), history=earlier)


def default_output_dir(spec: WorkflowSpec, given: Path | None = None) -> Path:
    """The output folder: ``--out-dir`` when given, else ``out/`` beside the workflow file."""
    return Path(os.path.abspath(given if given is not None else spec.base_dir / "out"))


def files_read(plan: Plan, registry: Registry) -> list[Path]:
    """Every file the workflow reads: its own file, the sources, and every existing file a
    step's parameters name (hierarchy and grading files), resolved against its folder."""
    spec = plan.spec
    found: list[Path] = [spec.path.resolve()]
    found += [s.path for s in spec.sources.values() if s.path is not None]

    def walk(value: Any) -> None:
        if isinstance(value, str):
            if 0 < len(value) < 4096 and "\0" not in value:
                p = spec.base_dir / value
                try:
                    if p.is_file():
                        found.append(p.resolve())
                except OSError:
                    pass
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    for node in plan.nodes.values():
        if node.kind == "publish":  # what a publish step writes is not read
            name = node.params.get("publisher", "")
            outs = getattr(registry.get("publisher", name).obj, "outputs", ("path",)) \
                if registry.has("publisher", name) else ("path",)
            walk({k: v for k, v in node.params.items() if k not in outs})
        else:
            walk(node.params)
    return found


def output_guard(plan: Plan, out_dir: Path, store: Store, registry: Registry) -> "OutputGuard":
    """The guard of a run's output paths: inside ``out_dir``, never over the store or a file
    the workflow reads, never over a file this store did not publish."""
    from .outputs import OutputGuard

    protected = files_read(plan, registry)
    if store.path is not None and str(store.path) != ":memory:":
        db = Path(os.path.abspath(store.path))
        protected += [db, Path(f"{db}.wal"), Path(f"{db}.tmp")]
    return OutputGuard(out_dir, protected=protected, published=store.published_digests,
                       store_path=None if str(store.path) == ":memory:" else store.path)


def check_outputs(plan: Plan, out_dir: Path, store: Store, registry: Registry) -> "OutputGuard":
    """Before a run starts: every path every publish step will write resolves inside
    ``out_dir`` and may be written, and no two steps write the same file or one inside the
    other's folder (raises InputError naming the step and the path)."""
    guard = output_guard(plan, out_dir, store, registry)
    claimed: dict[str, str] = {}
    for node in plan.steps():
        if node.kind != "publish":
            continue
        where = plan.spec.where(f"step {node.name!r}")
        publisher = registry.get("publisher", node.params["publisher"], where=where).obj
        mine: set[str] = set()
        for key, value in output_params(node.params, publisher):
            try:
                target = str(guard.resolve(value))
            except AnonflowError as exc:
                raise InputError(f"parameter {key!r}: {exc.message}", where=where) from None
            if target in mine:
                raise InputError(f"the step writes {value!r} twice; give each file its own path", where=where)
            for other, step in claimed.items():
                if inside(target, other) or inside(other, target):
                    raise InputError(f"{value!r} {'is' if target == other else 'overlaps'} what step {step!r} "
                                     f"publishes ({other}); each publish step needs a path of its own", where=where)
            mine.add(target)
        claimed.update((t, node.name) for t in mine)
    return guard


def output_params(params: dict[str, Any], publisher: Any) -> list[tuple[str, str]]:
    """The (parameter, path) pairs of the files and folders a publisher will write
    (``Publisher.output_files``; the declared ``outputs`` parameters by default)."""
    names = [k for k in getattr(publisher, "outputs", ("path",)) if isinstance(params.get(k), str)]
    derive = getattr(publisher, "output_files", None)
    files = derive(params) if derive is not None else [params[k] for k in names]
    by_value = {params[k]: k for k in names}
    return [(by_value.get(f, names[0] if names else "path"), f) for f in files]


#: distinct notes of fragment groups copied into a partitioned step's notes
NOTES_SHOWN = 3


def _merged_claims(claims: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """What every fragment group claims: a model all of them claim with the same parameters,
    or differing only in a size bound (``k``, ``l``, ``p``: the least holds for all)."""
    out: dict[str, dict[str, Any]] = {}
    for model in claims[0]:
        given = [c.get(model) for c in claims]
        if any(g is None or set(g) != set(given[0]) for g in given):
            continue
        merged: dict[str, Any] = {}
        for key in given[0]:
            values = [g[key] for g in given]
            if all(v == values[0] for v in values):
                merged[key] = values[0]
            elif key in ("k", "l", "p") and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                merged[key] = min(values)
            else:
                break
        else:
            out[model] = merged
    return out


class Runner:
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
        self._executor: Executor | None = None
        self._out_dir = Path(".")
        self.store = store
        self.registry = registry or get_registry()
        self.reporter = reporter or Reporter()
        self.history = history
        self.output_guard: Any = None
        #: the run's journal (:class:`anonflow.cleanup.Journal`) while it runs
        self.journal: Any = None

    def run(self, spec: WorkflowSpec, *, use_cache: bool = True, output_dir: Path | None = None,
            plan: Plan | None = None, retain: str | None = None) -> RunResult:
        """Run every step of ``spec``; raise :class:`AnonflowError` (with ``run_id`` set) on failure.

        SIGTERM and SIGHUP (in the main thread) end the run as Ctrl-C does: the workers are
        killed, every work folder removed and earlier outputs put back before the exception
        (``SystemExit(128 + signal)``) leaves; what a killed run leaves is cleaned up from its
        journal later (:mod:`anonflow.cleanup`).

        ``retain`` (default: the workflow's ``retain:``): what the store keeps of the tables this
        run used once it ends, succeeded or failed (:mod:`anonflow.retention`): ``all``;
        ``published``: the sources and intermediate tables are purged and the store rewritten;
        ``none``: the published tables too.

        Every origin and destination the plan names (PostgreSQL sources, publishers that declare
        destinations, a Dask scheduler) is checked against the egress policy before anything
        runs (:func:`anonflow.egress.check_plan`), and the policy stays in force while it runs."""
        from .cleanup import cleanup_on_termination

        policy = self.egress or egress_policy.current()
        with cleanup_on_termination(), self.store.exclusive(), egress_policy.use(policy):
            return self._run(spec, policy, use_cache=use_cache, output_dir=output_dir, plan=plan, retain=retain)

    def _make_out_dir(self, out_dir: Path) -> None:
        """Create the output folder with the modes the user's umask gives (as its published
        files get: the store being open makes new folders owner-only)."""
        from .filemodes import make_ordinary_folder

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
        from .cleanup import JOURNAL_PREFIX, recover_folder

        if not out_dir.is_dir():
            return
        for journal, done in recover_folder(out_dir).items():
            run_id = Path(journal).name[len(JOURNAL_PREFIX):-len(".jsonl")]
            self.store.journal_cleaned(run_id, done)  # a run of this store: 'anonflow runs' says it
            if done:
                import warnings

                from .errors import AnonflowWarning

                warnings.warn(f"cleaned up after interrupted run {run_id} in {out_dir}: " + "; ".join(done),
                              AnonflowWarning, stacklevel=4)

    def _run(self, spec: WorkflowSpec, policy: "Policy", *, use_cache: bool, output_dir: Path | None,
             plan: Plan | None, retain: str | None) -> RunResult:
        from .cleanup import LazyJournal

        retain = retain or spec.retain
        if retain not in RETAIN:
            raise InputError(f"retain must be one of {', '.join(RETAIN)}, got {retain!r}")
        plan = plan or build_plan(spec, self.registry)
        self.external = egress_policy.check_plan(plan, self.registry, policy)
        self.not_replayed = {}
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
        if self.executor_spec.address and any(plan.nodes[n].kind == "partition" for n in plan.order) \
                and any(plan.nodes[n].kind == "algorithm" for n in plan.order):
            # a scheduler that cannot be reached fails the run before anything runs
            self._executor = start_executor(self.executor_spec, where="--executor" if self.executor_override
                                            and self.executor_override.address else spec.where("executor"))
        run_id = self.store.begin_run(workflow=spec.name, path=str(spec.path), text=spec.text,
                                      text_hash=spec.text_hash, seed=spec.seed,
                                      overrides=[list(o) for o in spec.overrides], versions=versions(self.registry))
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
        from .retention import plan_purge, purge

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
        where = spec.where(f"{'source' if node.kind == 'source' else 'step'} {node.name!r}")
        seed = step_seed(spec.seed, node.name)
        rec: dict[str, Any] = {"step": node.name, "position": position, "kind": node.kind, "uses": node.uses,
                               "plugin_version": node.version, "params": node.params, "seed": seed,
                               "plugins": self._plugins(node)}
        t0 = time.perf_counter()

        if node.kind == "source":
            src = node.source
            remote = src.format == "postgres"  # a server's table: its content is known once read, every run
            if src.in_memory:  # a table handed over in Python: its name and content hash, no path
                digest = str(src.sha256)
                origin = f"memory:{src.name}"
            else:
                try:
                    digest = file_sha256(src.path) if not remote and (src.format != "duckdb" or src.path) else ""
                except FileNotFoundError:
                    raise InputError(f"file not found: {src.path}", where=where) from None
                origin = src.describe() if remote else str(src.path or src.table)
            if remote:  # its sha256: the content hash of the records as read (anonflow.postgres)
                try:
                    art = self.store.load_source(src, run_id=run_id, file_hash="")
                except InputError as exc:
                    raise InputError(exc.message, where=spec.where(exc.where or "")) from None
                digest = art.hash
            fingerprint = self._fingerprint(node, [digest, canonical_json(src.options), src.table], seed, spec.base_dir,
                                        rec["plugins"])
            if src.in_memory:
                rec.update(params={"path": None, "table": None, "in_memory": src.name}, fingerprint=fingerprint,
                           inputs=[{"name": origin, "sha256": digest}])
            else:
                rec.update(params={"path": str(src.path), "table": src.table, **src.options}, fingerprint=fingerprint,
                           inputs=[{"name": src.describe() if remote else str(src.path), "sha256": digest}])
            cached = self.store.cached_step(fingerprint) if use_cache and digest and not remote else None
            if remote:
                rec["status"] = "succeeded"
            elif cached:
                art = self.store.artifact(cached["output_table"])
                rec.update(status="cached", cached_from=cached["run_id"])
            else:
                try:
                    art = self.store.load_source(src, run_id=run_id, file_hash=digest)
                except InputError as exc:
                    raise InputError(exc.message, where=spec.where(exc.where or "")) from None
                rec["status"] = "succeeded"
            artifacts[node.name] = art
            rec.update(output_table=art.table, output_hash=art.hash, rows=art.rows,
                       seconds=time.perf_counter() - t0)
            self.store.record_step(run_id, rec, lineage=[(origin, art.table)])
            return rec

        inputs = [artifacts[i] for i in node.inputs]
        rec["inputs"] = [{"name": i, "table": a.table, "hash": a.hash} for i, a in zip(node.inputs, inputs)]
        refs = {r: artifacts[r] for r in node.refs}
        fingerprint = self._fingerprint(node, [a.hash for a in inputs] + [f"{r}:{a.hash}" for r, a in refs.items()],
                                        seed, spec.base_dir, rec["plugins"])
        rec["fingerprint"] = fingerprint
        parents = [a.table for a in inputs] + [a.table for a in refs.values()]
        extra_edges: list[tuple[str, str]] = []

        if use_cache and node.kind in ("typing", "filter", "sample", "partition", "hierarchy", "algorithm", "evaluate"):
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
                                 history=self.history)

        ctx = StepContext(step=node.name, seed=seed, rng=np.random.default_rng(seed), workflow_dir=spec.base_dir,
                          output_dir=out_dir, sql=self.store_sql, progress=self.reporter.progress,
                          store_table=store_table, run_record=run_record, output_guard=self.output_guard,
                          derive=self.store.derive_table, discard=self.store.discard,
                          relation=self.store.relation, copy_to=self.store.copy_to)
        tables = [self.store.get(a.table) for a in inputs]
        ctx.inputs = tables

        def referenced(name: str) -> TypedTable:
            if name not in refs:
                raise InputError(f"table {name!r} is not referenced by this step's parameters (of kind 'step'); "
                                 f"it references {', '.join(map(repr, refs)) or 'none'}", where=where)
            return self.store.get(refs[name].table)

        ctx.tables = referenced
        metrics: dict[str, float] = {}
        outputs: list[Output] = []
        failures: list[str] = []
        summary: dict[str, Any] = {}
        try:
            if node.kind == "typing":
                typed, summary = BUILTINS["typing"].run(tables[0], node.params, ctx, where)
                self._store_output(node, typed, rec, run_id)
            elif node.kind in ("filter", "sample", "partition"):
                typed, summary = BUILTINS[node.kind].run(tables[0], node.params, ctx, where)
                if typed.claims:  # an algorithm's output with records left out: its claims re-checked
                    typed = self._check_claims(node, typed.replace(claims={}), ctx, where, dict(typed.claims))
                self._store_output(node, typed, rec, run_id)
            elif node.kind == "hierarchy":
                typed, summary = BUILTINS["hierarchy"].run(tables[0], node.params, self.registry, ctx, where)
                self._store_output(node, typed, rec, run_id)
            elif node.kind == "algorithm":
                typed, suppressed = self._run_algorithm(node, tables[0], ctx, where)
                self._store_output(node, typed, rec, run_id)
                algo = node.plugin.obj
                if algo.suppresses or suppressed is not None:
                    # the step's recorded summary: suppressed records and the cap, in records
                    n_in = tables[0].num_rows
                    summary.update(suppressed=0 if suppressed is None else suppressed.num_rows,
                                   suppression_limit=suppression_limit(algo.suppression_cap(node.params), n_in))
                if suppressed is not None:
                    art = self.store.put(suppressed, run_id=run_id, step=node.name)
                    summary.update(suppressed_table=art.table)
                    ctx.note(f"{art.rows} record(s) suppressed, {art.rows / n_in:.2%} of {n_in} (cap "
                             f"{algo.suppression_param} = {algo.suppression_cap(node.params):g}: at most "
                             f"{summary['suppression_limit']}); they are kept in table {art.table} "
                             f"(view steps.\"{spec.name}.{node.name}.suppressed\")")
                    extra_edges += [(p, art.table) for p in parents]
                    self.store.view(f"{spec.name}.{node.name}.suppressed", art.table)
            elif node.kind == "evaluate":
                metrics, failures = BUILTINS["evaluate"].run(tables, node.params, self.registry, ctx, where)
            elif node.kind == "publish" and node.name in self.external and not egress_policy.current().replay_external:
                # a re-run of someone else's workflow writes nowhere outside its scratch folder
                self.not_replayed[node.name] = self.external[node.name]
                ctx.note(f"not replayed: this publisher writes outside the output folder "
                         f"({', '.join(_shown(d) for d in self.external[node.name])}), and a re-run writes only "
                         "into its scratch folder")
            elif node.kind == "publish":
                if self.output_guard is not None:
                    self.output_guard.step = node.name
                outputs = BUILTINS["publish"].run(tables[0], node.params, self.registry, ctx, where)
                if self.output_guard is not None:
                    self.output_guard.written.update((os.path.normpath(o.path), node.name) for o in outputs)
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
        child = rec.get("output_table") or (f"metrics:{node.name}" if node.kind == "evaluate" else None)
        edges = [(p, child) for p in parents if child] + extra_edges
        edges += [(p, table) for table, _ in published_tables for p in parents]
        for out in outputs:
            edges += [(p, out.path) for p in parents]
        self.store.record_step(run_id, rec, metrics=metrics, outputs=[o.to_json() for o in outputs],
                               lineage=edges)
        if rec.get("output_table"):
            self.store.view(f"{spec.name}.{node.name}", rec["output_table"])
            artifacts[node.name] = self.store.artifact(rec["output_table"])
        if failures:
            raise RunError("; ".join(failures), where=where)
        return rec

    def _run_algorithm(self, node: Node, table: TypedTable, ctx: StepContext,
                       where: str) -> tuple[TypedTable, TypedTable | None]:
        """Run an algorithm; return (published records, suppressed records or None).

        Suppressed records are those the algorithm returns with a null ``_class``: they are
        never silently dropped, but split off into a table of their own."""
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
            out = self._run_fragments(node, table, ctx, where)
        else:
            algo.check(node.params, table=table)
            out = algo.run(table, node.params, ctx)
        if not isinstance(out, TypedTable):
            raise RunError(f"algorithm {node.uses!r} returned {type(out).__name__}, expected a TypedTable", where=where)
        # never silently drop (or invent) records: the output must hold exactly the input's records
        if FRAGMENT in out.columns:
            raise RunError(f"algorithm {node.uses!r} returned the {FRAGMENT} column; it is the engine's", where=where)
        if out.num_rows != table.num_rows or ROW not in out.columns or not self.store.same_rows(out, table):
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
            return self._check_claims(node, self._renumber_classes(out), ctx, where, inherited), None
        self._check_suppression(node, nulls, table.num_rows, where, partitioned=FRAGMENT in table.columns)
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
            self.store.discard(out)
        return self._check_claims(node, self._renumber_classes(published), ctx, where, inherited), suppressed

    def _renumber_classes(self, table: TypedTable) -> TypedTable:
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
        mapping = self.store.sql(f"""
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
        out = self.store.derive_table(f"SELECT t.* REPLACE (CAST(m.new AS {_duckdb_int(kind)}) AS {c}) FROM t "
                                      f"JOIN m ON t.{c} = m.old", ordered=False, t=table, m=mapping)
        self.store.discard(table)
        return out.replace(typing=table.typing, claims=table.claims, hierarchies=table.hierarchies)

    # -- partitioned tables ----------------------------------------------------------------

    def _executor_for(self, where: str) -> Executor:
        if self._executor is None:
            self._executor = start_executor(self.executor_spec, where=where, journal=self.journal)
        return self._executor

    def _close_executor(self, abort: bool = False) -> None:
        """Stop the executor: wait for it, or (``abort``: the run failed or was interrupted)
        kill its workers now."""
        if self._executor is not None:
            try:
                if abort:
                    self._executor.abort()
                else:
                    self._executor.close()
            finally:
                self._executor = None

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

    def _work_folder(self, node: Node) -> WorkFolder:
        parent = Path(self.executor_spec.work_dir) if self.executor_spec.work_dir else self._out_dir
        if self.journal is not None:
            self.journal.start()  # makes the output folder (with the user's modes) and the journal first
        return WorkFolder(parent, node.name, self.journal)

    def _run_fragments(self, node: Node, table: TypedTable, ctx: StepContext, where: str) -> TypedTable:
        """Run an algorithm on a partitioned table: once per group of fragments on the
        executor (or, for an algorithm that :meth:`~anonflow.api.Algorithm.summarizes`, its
        summary per fragment, then once on the whole table with their sum)."""
        algo = node.plugin.obj
        if not algo.summarizes(node.params) and not algo.per_fragment:
            ctx.note(f"{node.uses} does not run per fragment (its result is one for the whole table): it ran on the "
                     "whole table, here")
            whole = self._whole(table)
            ctx.inputs = [whole, *ctx.inputs[1:]]
            algo.check(node.params, table=whole)
            return algo.run(whole, node.params, ctx)
        executor = self._executor_for(where)
        work = self._work_folder(node)
        t0 = time.perf_counter()
        clock = {"write": 0.0, "run": 0.0, "merge": 0.0}
        try:
            self.store.copy_fragments(table, work.path / "in0")
            if algo.summarizes(node.params):
                return self._run_summarized(node, table, ctx, executor, work, t0)
            for i, other in enumerate(ctx.inputs[1:], 1):
                self.store.copy_fragments(other, work.path / f"in{i}", by=table)
            clock["write"] = time.perf_counter() - t0
            grouping = fragment_groups(algo, node.params, table, self.registry, ctx)
            domain = self._domain(table)
            for line in grouping.notes:
                ctx.note(line)
            groups, sizes = grouping.groups, grouping.sizes
            for other in ctx.inputs[1:]:
                if CLASS in other.columns:  # e.g. refine's partition: its classes stay whole
                    groups, sizes, note = keep_classes_together(groups, sizes, table, other, ctx)
                    if note:
                        ctx.note(note)
            done: dict[tuple[int, ...], FragmentResult] = {}
            issued = 0  # task numbers (and result files) stay unique across rounds
            while True:
                todo = [g for g in groups if tuple(g) not in done]
                tasks = [self._task(node, ctx, work, g, issued + i, domain=domain) for i, g in enumerate(todo)]
                issued += len(tasks)
                advance = self.reporter.progress(sum(len(g) for g in todo), f"{node.name}: fragments")
                t1 = time.perf_counter()
                for g, res in zip(todo, run_all(executor, tasks, advance)):
                    done[tuple(g)] = res
                clock["run"] += time.perf_counter() - t1
                bad = [i for i, g in enumerate(groups) if done[tuple(g)].infeasible]
                if not bad:
                    break
                if len(bad) == len(groups):
                    # no group passes the algorithm's check (a parameter it refuses, or data too
                    # poor even for the largest group): merging cannot help; say why, as unpartitioned
                    first = done[tuple(groups[0])]
                    raise InputError(str(first.infeasible) + ("" if len(groups) == 1 else
                                     f" (in every one of the {len(groups)} fragment groups)"), where=where)
                first = done[tuple(groups[bad[0]])]
                ctx.note(f"{len(bad)} fragment group(s) failed {node.uses}'s check (fragments "
                         f"{'+'.join(map(str, first.fragments))}: {first.infeasible}); merged with a neighbour")
                groups, sizes = merge_neighbours(groups, sizes, bad)
            results = [done[tuple(g)] for g in groups]
            t2 = time.perf_counter()
            out = self._merge_results(node, table, results, ctx, where)
            clock["merge"] = time.perf_counter() - t2
        except BaseException:
            self._close_executor(abort=True)  # no worker writes into the folder while it is removed
            raise
        finally:
            work.remove()
        busy = sum(r.seconds for r in results)
        ctx.note(f"{node.uses} ran on {len(results)} fragment group(s) of {describe_sizes(np.asarray(sizes))} records "
                 f"on {self.executor_spec.describe()}: fragments written in {clock['write']:.2f} s, run in "
                 f"{clock['run']:.2f} s ({busy:.2f} s of work in {len({r.pid for r in results})} process(es)), merged "
                 f"in {clock['merge']:.2f} s")
        return out

    def _domain(self, table: TypedTable) -> dict[str, ColumnDomain]:
        """The quasi-identifiers over the whole table, for its fragments (``TypedTable.domain``):
        a numeric column's range, mean and population deviation, a categorical one's sorted
        distinct values -- computed by DuckDB (one thread: the sums are the same every time)."""
        out: dict[str, ColumnDomain] = {}
        for c in table.typing.quasi:
            if c not in table.columns:
                continue
            q = ident(c)
            typ = table.schema.field(c).type
            numeric = pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ)
            if table.typing.get(c).type == "continuous" and numeric:
                row = self.store.sql(f"SELECT min({q})::DOUBLE, max({q})::DOUBLE, avg({q}::DOUBLE), "
                                     f"stddev_pop({q}::DOUBLE) FROM t", t=table).to_pylist()[0]
                lo, hi, mean, std = row.values()
                out[c] = ColumnDomain(lo=lo, hi=hi, mean=mean, std=std)
            else:
                values = self.store.sql(f"SELECT DISTINCT {q} AS v FROM t WHERE {q} IS NOT NULL", t=table).column(0)
                values = values.combine_chunks()
                if pa.types.is_dictionary(values.type):
                    values = values.dictionary_decode()
                out[c] = ColumnDomain(values=values.take(pc.array_sort_indices(values)))
        return out

    def _task(self, node: Node, ctx: StepContext, work: WorkFolder, group: list[int], index: int,
              mode: str = "run", domain: dict[str, ColumnDomain] | None = None) -> FragmentTask:
        inputs = []
        for i, t in enumerate(ctx.inputs if mode == "run" else ctx.inputs[:1]):
            files = [f for frag in group for f in work.files(i, frag)]
            inputs.append({"files": files, "typing": t.typing, "claims": t.claims, "hierarchies": t.hierarchies,
                           "domain": (domain or {}) if i == 0 else {}})
        return FragmentTask(step=node.name, algorithm=node.uses, version=node.version, params=dict(node.params),
                            seed=ctx.seed, fragments=list(group), inputs=inputs,
                            out_path=work.result(index, mode),
                            mode=mode, index=index)

    def _merge_results(self, node: Node, table: TypedTable, results: list[FragmentResult], ctx: StepContext,
                       where: str) -> TypedTable:
        """The groups' results as one table in the store: class ids made global (each group's
        offset by the classes before it), the columns the algorithm changed taken from the
        results, the others from the input."""
        first = results[0]
        for res in results[1:]:
            if not res.schema.equals(first.schema) or res.typing != first.typing \
                    or {c: h.hash for c, h in res.hierarchies.items()} != \
                    {c: h.hash for c, h in first.hierarchies.items()}:
                raise RunError(f"algorithm {node.uses!r} gave fragments {res.fragments} another schema, typing or "
                               f"hierarchies than fragments {first.fragments}; its results cannot be merged",
                               where=where)
        changed = [c for c in first.schema.names if any(c in r.columns for r in results)]
        offsets = np.cumsum([0] + [r.classes for r in results[:-1]]).astype(np.int64)
        flags = {f"_af_has{i}": pa.array([c in r.columns for r in results]) for i, c in enumerate(changed)}
        o = pa.table({"_af_file": pa.array([r.path for r in results]), "_af_off": pa.array(offsets), **flags})
        select = []
        for c in first.schema.names:
            q = ident(c)
            if c == ROW:
                select.append(f"t.{q}")
            elif c == CLASS:
                select.append(f"(r.{q} + o._af_off) AS {q}")
            elif c in changed:
                i = changed.index(c)
                whole = all(c in r.columns for r in results)
                select.append(f"r.{q}" if whole else f"CASE WHEN o._af_has{i} THEN r.{q} ELSE t.{q} END AS {q}")
            else:
                select.append(f"t.{q}")
        out = self.store.read_results(f"SELECT {', '.join(select)} FROM t JOIN r ON t.{ident(ROW)} = r.{ident(ROW)} "
                                      "JOIN o ON r.filename = o._af_file", [r.path for r in results], t=table, o=o)
        claims = _merged_claims([r.claims for r in results])
        dropped = sorted(set().union(*[set(r.claims) for r in results]) - set(claims))
        if dropped:
            ctx.note(f"claim(s) {', '.join(dropped)} made by some fragment groups only (or with parameters that "
                     "cannot be combined) dropped")
        # what the groups fitted: a value every group recorded alike is the step's
        fitted: dict[str, list[str]] = {}
        for res in results:
            for name, value in res.fitted.items():
                fitted.setdefault(name, []).append(canonical_json(value, strict=True))
        for name, texts in sorted(fitted.items()):
            if len(texts) == len(results) and len(set(texts)) == 1:
                ctx.record_fitted(name, results[0].fitted[name])
            else:
                ctx.note(f"fitted value {name!r} recorded differently (or not at all) by the fragment groups: not "
                         "recorded for the step")
        # the groups' own notes: each distinct one once, with how many groups made it
        notes: dict[str, list[int]] = {}
        for res in results:
            for line in res.notes:
                notes.setdefault(line, []).append(res.fragments[0])
        for line, firsts in list(notes.items())[:NOTES_SHOWN]:
            who = "every fragment group" if len(firsts) == len(results) else \
                f"{len(firsts)} of {len(results)} fragment groups (the first from fragment {firsts[0]})"
            ctx.note(f"{who}: {line}")
        if len(notes) > NOTES_SHOWN:
            ctx.note(f"{len(notes) - NOTES_SHOWN} other distinct note(s) of fragment groups not shown")
        return TypedTable(None, first.typing, claims, first.hierarchies, stored=out.stored)

    def _whole(self, table: TypedTable) -> TypedTable:
        """The partitioned table without its ``_fragment`` column (a view: nothing is copied)."""
        whole = self.store.derive_table(f"SELECT * EXCLUDE ({ident(FRAGMENT)}) FROM t", view=True, t=table)
        return whole.replace(typing=table.typing, claims=table.claims, hierarchies=table.hierarchies)

    def _run_summarized(self, node: Node, table: TypedTable, ctx: StepContext, executor: Executor,
                        work: WorkFolder, t0: float) -> TypedTable:
        """Each fragment's summary where it lies, summed by DuckDB; then one run on the
        whole table (without its ``_fragment`` column) with the sum as ``ctx.summary``."""
        algo = node.plugin.obj
        ids = [int(i) for i in self.store.sql(f"SELECT DISTINCT {ident(FRAGMENT)} FROM t ORDER BY 1",
                                              t=table).column(0).to_pylist()]
        tasks = [self._task(node, ctx, work, [f], i, mode="summarize") for i, f in enumerate(ids)]
        advance = self.reporter.progress(len(tasks), f"{node.name}: fragment summaries")
        results = run_all(executor, tasks, advance)
        files = [r.path for r in results]
        listed = ", ".join(f"'{duckdb_file(f).replace(chr(39), chr(39) * 2)}'" for f in files)
        summary = self.store.sql(f"SELECT * EXCLUDE (_af_n), sum(_af_n)::BIGINT AS _af_n FROM read_parquet([{listed}]) "
                                 "GROUP BY ALL ORDER BY ALL NULLS LAST")
        ctx.note(f"{node.uses}: summaries of {len(ids)} fragment(s) on {self.executor_spec.describe()} summed into "
                 f"{summary.num_rows:,} rows in {time.perf_counter() - t0:.1f} s")
        whole = self._whole(table)
        ctx.inputs = [whole, *ctx.inputs[1:]]
        ctx.summary = summary
        algo.check(node.params, table=whole)
        return algo.run(whole, node.params, ctx)

    def _check_claims(self, node: Node, published: TypedTable, ctx: StepContext, where: str,
                      inherited: dict[str, dict[str, Any]] | None = None) -> TypedTable:
        """Check each claimed model with the privacy metric of the same name on the published
        records; a claim that fails stops the run, one no installed metric can judge is dropped
        (with a note): a table never claims what was not checked.

        ``inherited``: the claims of the step's input (an earlier algorithm of a chain) that
        this step does not make itself. Each is checked the same way on this step's output and
        kept when it holds; one that does not hold, or that no metric can judge, is dropped
        with a note, never an error (this step did not claim it). A later step's own claim of
        the same model replaces the input's."""
        inherited = inherited or {}
        own = dict(published.claims)
        kept: dict[str, dict[str, Any]] = {}
        for model, given in [*own.items(), *inherited.items()]:
            carried = model not in own
            source = "of the input (an earlier algorithm) " if carried else ""
            reg = self.registry.get("metric", model) if self.registry.has("metric", model) else None
            if reg is None or reg.obj.category != "privacy":
                ctx.note(f"claim {model!r} {source}dropped: no installed privacy metric of that name can check it")
                continue
            checked = published.replace(claims={**own, model: given})
            try:
                mparams = validate_params(reg.obj.params, given)
                result = reg.obj.compute(None, checked, mparams, dataclasses.replace(ctx, notes=[]))
            except (InputError, ParamError) as exc:
                if carried:
                    ctx.note(f"claim {model} {canonical_json(given)} {source}dropped: its check cannot take this "
                             f"step's output ({exc})")
                    continue
                raise PluginError(f"algorithm {node.uses!r} claims {model} {canonical_json(given)}, which the "
                                  f"{model} check cannot take: {exc}", where=where) from None
            holds = result.get(f"{model}.holds")
            if holds is None:
                ctx.note(f"claim {model!r} {source}dropped: its check gives no verdict for {canonical_json(given)}")
                continue
            detail = ", ".join(f"{k} = {float(v):g}" for k, v in result.items() if k != f"{model}.holds")
            if not holds and carried:
                ctx.note(f"claim {model} {canonical_json(given)} of the input (an earlier algorithm) dropped: "
                         f"this step's output does not satisfy it ({detail})")
                continue
            if not holds:
                raise RunError(f"algorithm {node.uses!r} claims {model} {canonical_json(given)} but its output "
                               f"does not satisfy it ({detail})", where=where)
            if carried:
                ctx.note(f"claim {model} {canonical_json(given)} of the input (an earlier algorithm) kept: "
                         "re-checked on this step's output")
            kept[model] = given
        return published.replace(claims=kept)

    @staticmethod
    def _check_suppression(node: Node, suppressed: int, records: int, where: str, partitioned: bool = False) -> None:
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

    def _store_output(self, node: Node, typed: TypedTable, rec: dict[str, Any], run_id: str) -> None:
        art = self.store.put(typed, run_id=run_id, step=node.name)
        rec.update(output_table=art.table, output_hash=art.hash, rows=art.rows)

    def _record_failure(self, run_id: str, rec: dict[str, Any], t0: float, error: str) -> None:
        rec.update(status="failed", error=error, seconds=time.perf_counter() - t0)
        self.store.record_step(run_id, rec)

    def _fingerprint(self, node: Node, input_hashes: list[str], seed: int, base: Path,
                     plugins: list[dict[str, str]]) -> str:
        # files named in parameters count by their path relative to the workflow's folder (their
        # content hashes are parameters too), so a moved checkout keeps its fingerprints. The
        # code counts as well: anonflow's own and that of every plugin the step uses, so a
        # plugin fixed without a version bump is run again rather than served from the cache.
        params = node.params
        if node.kind == "publish" and self.registry.has("publisher", str(params.get("publisher", ""))):
            secret = getattr(self.registry.get("publisher", params["publisher"]).obj, "secret_params", ())
            params = {k: v for k, v in params.items() if k not in secret}
        return hashlib.sha256(canonical_json({
            "kind": node.kind, "uses": node.uses, "version": node.version,
            "params": relative_paths(params, base),
            "inputs": input_hashes, "seed": seed, "store_schema": SCHEMA_VERSION,
            "code": {"anonflow": engine_digest(),
                     "plugins": {f"{p['kind']}:{p['name']}": p["code"] for p in plugins}},
        }).encode()).hexdigest()

    def _plugins(self, node: Node) -> list[dict[str, str]]:
        """:func:`step_plugins` as the step record keeps them (kind, name, version,
        distribution, code digest)."""
        return [r.describe() for r in step_plugins(node, self.registry)]

    def store_sql(self, query: str, params: list[Any] | None = None, **tables: Any) -> Any:
        return self.store.sql(query, params, **tables)
