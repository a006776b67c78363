"""Where the fragments of a partitioned table are processed: executors.

An algorithm step fed by a partitioned table (the ``partition`` step) is cut into tasks, one
per group of fragments (:class:`FragmentTask`). Each task reads its fragment's records from
Parquet files in a work folder, runs the algorithm there (:func:`run_fragment`) and writes
back only the records' ids, their class labels and the columns the algorithm changed. The
same function runs on every executor, so the results are the same bytes wherever it runs:

- ``local``: in this process, one task after the other (the default);
- ``processes:N``: N worker processes on this machine (Python's ``concurrent.futures``), with
  the tasks of a worker that dies run again by a new pool;
- ``dask`` / ``dask:N``: a Dask ``distributed`` LocalCluster of N worker processes that
  anonflow starts and stops, speaking TLS with throw-away credentials (no other process can
  join it: :func:`anonflow.egress.local_cluster_security`); ``dask:tcp://host:port``: an
  existing scheduler, named only on the command line or in Python (:mod:`anonflow.egress`;
  any cluster a Dask deployer starts: Kubernetes, SLURM, YARN...), whose workers must see the work folder
  (``executor: {work_dir: ...}`` on a shared file system) and have anonflow and the same
  plugins installed. Dask re-runs the tasks of a worker that dies.

Tasks carry no seed of their own: each derives its generator from the step's seed and the
first fragment of its group, so the result does not depend on which worker ran it, or when.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from .errors import AnonflowWarning, InputError, RunError

KINDS = ("local", "processes", "dask")

#: at most this many worker processes per core (``processes:N``, a LocalCluster's ``dask:N``):
#: more only adds memory and start-up time, and thousands exhaust the process table
WORKERS_PER_CORE = 4


def most_workers() -> int:
    """The most worker processes anonflow starts on this machine."""
    return WORKERS_PER_CORE * (os.cpu_count() or 1)


@dataclass(frozen=True)
class ExecutorSpec:
    """How fragments are run: ``kind`` local | processes | dask; ``workers`` for processes
    and a LocalCluster; ``address`` a Dask scheduler; ``work_dir`` the folder fragments travel
    through (default: a private folder inside the output folder, removed after each step)."""

    kind: str = "local"
    workers: int | None = None
    address: str | None = None
    work_dir: str | None = None

    def describe(self) -> str:
        if self.kind == "local":
            return "local"
        if self.kind == "processes":
            return f"processes:{self.workers}"
        return f"dask:{self.address}" if self.address else \
            f"dask (LocalCluster of {self.workers} worker{'s' if self.workers != 1 else ''})"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in {"kind": self.kind, "workers": self.workers, "address": self.address,
                                  "work_dir": self.work_dir}.items() if v is not None}

    def merged(self, other: "ExecutorSpec | None") -> "ExecutorSpec":
        """``other`` (the command line's) where given, keeping this one's work folder."""
        if other is None:
            return self
        return ExecutorSpec(other.kind, other.workers, other.address, other.work_dir or self.work_dir)


_ADDRESS = re.compile(r"^(tcp|tls|ucx|inproc|ws|wss)://[^\s]+$")


def parse_executor(text: Any, where: str) -> ExecutorSpec:
    """``local``, ``processes:N``, ``dask``, ``dask:N`` or ``dask:tcp://host:port``."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"expected local, processes:N or dask[:ADDRESS], got {text!r}", where=where)
    kind, _, rest = text.strip().partition(":")
    return executor_spec({"kind": kind, **({"address": rest} if rest and not rest.isdigit() else {}),
                          **({"workers": int(rest)} if rest.isdigit() else {})}, where)


def executor_spec(data: Any, where: str, base: Path | None = None) -> ExecutorSpec:
    """The ``executor:`` block of a workflow (a string as for ``--executor``, or a mapping with
    ``kind``, ``workers``, ``address``, ``work_dir``)."""
    if isinstance(data, str):
        return parse_executor(data, where)
    if not isinstance(data, dict):
        raise InputError(f"expected local, processes:N, dask[:ADDRESS] or a mapping with kind, workers, address, "
                         f"work_dir; got {data!r}", where=where)
    unknown = sorted(set(data) - {"kind", "workers", "address", "work_dir"})
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r}; expected kind, workers, address, work_dir", where=where)
    kind = data.get("kind", "local")
    if kind not in KINDS:
        raise InputError(f"unknown executor {kind!r}; expected one of {', '.join(KINDS)}", where=where)
    workers = data.get("workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 4096):
        raise InputError(f"'workers' must be a whole number from 1 to 4096, got {workers!r}", where=where)
    address = data.get("address")
    if address is not None:
        if kind != "dask":
            raise InputError(f"an address is for the dask executor, not {kind}", where=where)
        if not isinstance(address, str) or not _ADDRESS.match(address):
            raise InputError(f"expected a Dask scheduler address such as tcp://host:8786, got {address!r}",
                             where=where)
        if workers is not None:
            raise InputError("give a scheduler address or a number of workers, not both", where=where)
    work_dir = data.get("work_dir")
    if work_dir is not None:
        if not isinstance(work_dir, str) or not work_dir or "\0" in work_dir:
            raise InputError(f"'work_dir' must be a folder, got {work_dir!r}", where=where)
        if base is not None and not os.path.isabs(work_dir):
            work_dir = str(base / work_dir)
    if kind == "local":
        if workers not in (None, 1):
            raise InputError("the local executor runs one fragment at a time; use processes:N for N workers",
                             where=where)
        workers = None
    elif kind == "processes" or (kind == "dask" and address is None):
        workers = workers or (os.cpu_count() or 1)
        if workers > most_workers():
            import warnings

            warnings.warn(f"{where}: {workers} worker processes asked for, {most_workers()} started "
                          f"({WORKERS_PER_CORE} per core on this machine's {os.cpu_count() or 1}); more would "
                          "only add memory and start-up time", AnonflowWarning, stacklevel=2)
            workers = most_workers()
    return ExecutorSpec(kind, workers, address, work_dir)


# -- tasks ---------------------------------------------------------------------------------


@dataclass
class FragmentTask:
    """One group of fragments for one algorithm step. ``inputs``: per input table, the files
    of its records and its typing, hierarchies and claims. ``mode``: ``run`` (the algorithm's
    ``run``) or ``summarize`` (its ``summarize``)."""

    step: str
    algorithm: str
    version: str
    params: dict[str, Any]
    seed: int
    fragments: list[int]
    inputs: list[dict[str, Any]]
    out_path: str
    mode: str = "run"
    index: int = 0


@dataclass
class FragmentResult:
    index: int
    fragments: list[int]
    rows: int = 0
    path: str | None = None
    infeasible: str | None = None
    classes: int = 0
    columns: list[str] = field(default_factory=list)
    schema: Any = None
    typing: Any = None
    hierarchies: dict[str, Any] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: what the algorithm recorded with ``ctx.record_fitted`` on this group
    fitted: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    pid: int = 0


def fragment_seed(seed: int, first_fragment: int) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{seed}\0fragment\0{first_fragment}".encode()).digest()[:8], "little")


def _read(files: list[str]) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .schema import ROW

    parts = [pq.ParquetFile(f).read() for f in files]
    data = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    return data.sort_by(ROW).combine_chunks()


def _write(table: Any, path: str) -> None:
    import pyarrow.parquet as pq

    tmp = f"{path}.{os.getpid()}.tmp"
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)  # a worker that dies mid-write leaves no half file under the final name


_STORE: Any = None


class _LazyStore:
    """A task's view of its process's in-memory store: opened on the first query (most
    algorithms run on the fragment in memory and never ask), kept for the process's next tasks
    (opening one costs tens of milliseconds), and cleared of the task's scratch tables after it."""

    def _store(self) -> Any:
        global _STORE
        if _STORE is None:
            from .store import Store

            _STORE = Store(":memory:")
            _STORE.con.execute("SET threads = 1")
            _STORE.threads = 1
        self.used = True
        return _STORE

    used = False

    def sql(self, query: str, params: Any = None, **tables: Any) -> Any:
        return self._store().sql(query, params, **tables)

    def derive_table(self, *args: Any, **kwargs: Any) -> Any:
        return self._store().derive_table(*args, **kwargs)

    def relation(self, *args: Any, **kwargs: Any) -> Any:
        return self._store().relation(*args, **kwargs)

    def discard(self, table: Any) -> None:
        if _STORE is not None:
            _STORE.discard(table)

    def clean(self) -> None:
        if self.used and _STORE is not None:
            _STORE._drop_scratch()
            for (name,) in _STORE.con.execute("SELECT view_name FROM duckdb_views() WHERE temporary").fetchall():
                _STORE.con.execute(f"DROP VIEW IF EXISTS temp.\"{name}\"")


def run_fragment(task: FragmentTask) -> FragmentResult:
    """Run one task where it is (any process, any machine that sees the work folder)."""
    import numpy as np
    import pyarrow as pa

    from .api import StepContext
    from .errors import AnonflowError
    from .plugins import get_registry
    from .schema import CLASS, ROW
    from .table import TypedTable

    t0 = time.perf_counter()
    registry = get_registry()
    reg = registry.get("algorithm", task.algorithm)
    if reg.version != task.version:
        raise RunError(f"this worker has {task.algorithm} {reg.version}, the run uses {task.version}: install the "
                       "same plugins on every worker")
    algo = reg.obj
    tables = []
    for given in task.inputs:
        table = TypedTable(_read(given["files"]), given["typing"], given["claims"], given["hierarchies"])
        table.domain = dict(given.get("domain") or {})
        tables.append(table)
    result = FragmentResult(task.index, task.fragments, rows=tables[0].num_rows, pid=os.getpid())
    seed = fragment_seed(task.seed, task.fragments[0])
    store = _LazyStore()
    try:
        ctx = StepContext(step=task.step, seed=seed, rng=np.random.default_rng(seed), workflow_dir=Path("."),
                          output_dir=Path("."), sql=store.sql, derive=store.derive_table, discard=store.discard,
                          relation=store.relation)
        ctx.inputs = tables
        if task.mode == "summarize":
            summary = algo.summarize(tables[0], task.params, ctx)
            _write(summary, task.out_path)
            result.path, result.notes = task.out_path, list(ctx.notes)
            result.seconds = time.perf_counter() - t0
            return result
        try:
            algo.check(task.params, table=tables[0])
        except AnonflowError as exc:
            result.infeasible = exc.message if hasattr(exc, "message") else str(exc)
            return result
        out = algo.run(tables[0], task.params, ctx)
        if not isinstance(out, TypedTable):
            raise RunError(f"algorithm {task.algorithm!r} returned {type(out).__name__}, expected a TypedTable")
        data = out.data
        if ROW not in data.column_names or CLASS not in data.column_names:
            raise RunError(f"algorithm {task.algorithm!r} returned no {ROW if ROW not in data.column_names else CLASS} "
                           "column")
        data = data.sort_by(ROW)
        given = tables[0].data
        if data.num_rows != given.num_rows or not data.column(ROW).equals(given.column(ROW)):
            raise RunError(f"algorithm {task.algorithm!r} returned {data.num_rows} records for {given.num_rows} "
                           "(or changed their _row ids); every record must be accounted for")
        changed = [c for c in data.column_names if c not in (ROW, CLASS)
                   and (c not in given.column_names or not data.column(c).equals(given.column(c)))]
        back = data.select([ROW, CLASS, *changed])
        classes = back.column(CLASS)
        top = pa.compute.max(classes).as_py()
        if top is not None and pa.compute.min(classes).as_py() < 0:
            raise RunError(f"algorithm {task.algorithm!r} returned a negative class id")
        _write(back, task.out_path)
        result.path = task.out_path
        result.classes = 0 if top is None else int(top) + 1
        result.columns = changed
        result.schema = data.schema
        result.typing = out.typing
        result.hierarchies = dict(sorted(out.hierarchies.items()))
        result.claims = out.claims
        result.notes = list(ctx.notes)
        result.fitted = dict(ctx.fitted)
        result.seconds = time.perf_counter() - t0
        return result
    finally:
        store.clean()


# -- executors ----------------------------------------------------------------------------


class Executor:
    """Runs tasks; yields ``(task index, result)`` as they finish."""

    spec: ExecutorSpec

    def map(self, tasks: list[FragmentTask]) -> Iterator[FragmentResult]:
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 - most executors hold nothing
        pass

    def abort(self) -> None:
        """The run was interrupted: stop now, without waiting for running tasks."""
        self.close()


class LocalExecutor(Executor):
    def __init__(self, spec: ExecutorSpec) -> None:
        self.spec = spec

    def map(self, tasks: list[FragmentTask]) -> Iterator[FragmentResult]:
        for task in tasks:
            yield run_fragment(task)


def _die_with_parent(parent: int) -> None:
    """A worker process's initializer: end with the run's process even when that one is
    killed outright (SIGKILL leaves no chance to stop the workers). Linux asks the kernel
    (``PR_SET_PDEATHSIG``); elsewhere a worker of a dead run ends at its next task."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


@contextlib.contextmanager
def _main_not_reimported() -> Iterator[None]:
    """Start worker processes without their importing the caller's main script when it is no
    file (a script piped to ``python -``, whose ``__main__.__file__`` is ``<stdin>``): a
    spawned worker re-runs the main module's file, and one named ``<stdin>`` cannot be found,
    so every worker died at start. The tasks need only anonflow and the plugins."""
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(main, "__spec__", None) is not None or os.path.isfile(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


class ProcessExecutor(Executor):
    """N processes (spawned: a forked copy of a process holding a DuckDB connection and its
    threads is unsafe). A worker that dies breaks the pool; the unfinished tasks then run
    again on a new one, at most ``retries`` times. When the run is interrupted
    (:meth:`abort`) the workers are killed, not waited for; they also die with the run's
    process (:func:`_die_with_parent`)."""

    retries = 3

    def __init__(self, spec: ExecutorSpec) -> None:
        self.spec = spec
        self.pool: Any = None

    def _pool(self) -> Any:
        if self.pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(max_workers=self.spec.workers,
                                            mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_die_with_parent, initargs=(os.getpid(),))
        return self.pool

    def map(self, tasks: list[FragmentTask]) -> Iterator[FragmentResult]:
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        pending = {t.index: t for t in tasks}
        broken = 0
        while pending:
            pool = self._pool()
            with _main_not_reimported():  # workers start as tasks are submitted
                futures = {pool.submit(run_fragment, t): i for i, t in pending.items()}
            try:
                waiting = set(futures)
                while waiting:
                    done, waiting = wait(waiting, return_when=FIRST_COMPLETED)
                    for fut in sorted(done, key=lambda f: futures[f]):
                        if isinstance(fut.exception(), BrokenProcessPool):
                            raise fut.exception()  # type: ignore[misc]
                        res = fut.result()
                        pending.pop(futures[fut], None)
                        yield res
            except BrokenProcessPool:
                broken += 1
                self.pool.shutdown(wait=False, cancel_futures=True)
                self.pool = None
                if broken > self.retries:
                    raise RunError(f"worker processes died {broken} time(s) running fragments; {len(pending)} fragment "
                                   "group(s) could not be run (out of memory, or workers that cannot start: see the "
                                   "system log)") from None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def abort(self) -> None:
        """Kill the workers (the run was interrupted: their tasks' results are not wanted)."""
        pool, self.pool = self.pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())
        for p in processes:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                p.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        for p in processes:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                p.join(5)


class DaskExecutor(Executor):
    """A ``distributed`` client: of a scheduler at ``address``, or of a LocalCluster of
    worker processes started here (and stopped by :meth:`close`)."""

    def __init__(self, spec: ExecutorSpec, where: str = "", journal: Any = None) -> None:
        self.spec = spec
        self.journal = journal
        try:
            import logging

            from distributed import Client, LocalCluster
        except ImportError:
            raise InputError("the dask executor needs Dask's distributed: pip install 'anonflow[dask]'",
                             where=where) from None
        self.cluster = None
        self._local: str | None = None
        if spec.address:
            try:
                self.client = Client(spec.address, timeout="5s", set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise InputError(f"cannot reach the Dask scheduler at {spec.address}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                                 where=where) from None
        else:
            import tempfile

            from .cleanup import private_folder
            from .egress import local_cluster_security

            security = local_cluster_security()  # TLS, throw-away credentials: no other process joins
            # the workers spill the fragments they hold (original records) here: owner-only, removed on
            # close, journaled first (removed after a kill too)
            self._local = str(private_folder(tempfile.gettempdir(), "anonflow-dask-", journal, "dask"))
            self.cluster = LocalCluster(n_workers=spec.workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None, silence_logs=logging.ERROR,
                                        local_directory=self._local, security=security)
            self.client = Client(self.cluster, security=security, set_as_default=False)

    def map(self, tasks: list[FragmentTask]) -> Iterator[FragmentResult]:
        from distributed import as_completed

        futures = [self.client.submit(run_fragment, t, key=f"anonflow-{t.step}-{t.index}-{os.urandom(4).hex()}",
                                      pure=False) for t in tasks]
        try:
            for fut in as_completed(futures, loop=self.client.loop):
                try:
                    yield fut.result()
                except Exception as exc:
                    if type(exc).__name__ == "KilledWorker":
                        raise RunError(f"Dask workers died running a fragment group again and again ({exc}); "
                                       "out of memory?") from None
                    raise
        finally:
            for fut in futures:
                fut.release()

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            try:
                if self.cluster is not None:
                    self.cluster.close()
            finally:
                if self._local is not None:
                    shutil.rmtree(self._local, ignore_errors=True)
                    if self.journal is not None and not os.path.lexists(self._local):
                        self.journal.removed(self._local)


def start_executor(spec: ExecutorSpec, where: str = "", journal: Any = None) -> Executor:
    """``journal`` (:class:`anonflow.cleanup.Journal`): where folders the executor creates
    (a LocalCluster's local folder) are recorded before they are made."""
    if spec.kind == "processes":
        return ProcessExecutor(spec)
    if spec.kind == "dask":
        return DaskExecutor(spec, where, journal=journal)
    return LocalExecutor(spec)


class WorkFolder:
    """A private folder the fragments and results of one step travel through: created inside
    ``parent`` (mode 0700, journaled first: :mod:`anonflow.cleanup`), removed afterwards
    whatever happened."""

    def __init__(self, parent: Path, step: str, journal: Any = None) -> None:
        from .cleanup import private_folder

        parent.mkdir(parents=True, exist_ok=True)
        self.journal = journal
        self.path = private_folder(parent, f".anonflow-work-{re.sub(r'[^A-Za-z0-9_.-]', '_', step)[:40]}-", journal,
                                   "work")

    def files(self, input_index: int, fragment: int) -> list[str]:
        """The Parquet files DuckDB wrote for one fragment, listed exactly (the folder's path is
        the user's and is never read as a pattern)."""
        folder = self.path / f"in{input_index}" / f"_af_part={fragment}"
        with os.scandir(folder) as it:
            return sorted(e.path for e in it if e.name.endswith(".parquet") and e.is_file(follow_symlinks=False))

    def result(self, index: int, mode: str = "run") -> str:
        return str(self.path / f"{'result' if mode == 'run' else 'summary'}-{index:06d}.parquet")

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self.journal is not None and not os.path.lexists(self.path):
            self.journal.removed(self.path)


def run_all(executor: Executor, tasks: list[FragmentTask], progress: Callable[[int], None]) -> list[FragmentResult]:
    """Every task's result, in task order (whatever order they finish in)."""
    results: dict[int, FragmentResult] = {}
    for res in executor.map(tasks):
        results[res.index] = res
        progress(len(res.fragments))
    missing = [t.index for t in tasks if t.index not in results]
    if missing:
        raise RunError(f"{len(missing)} fragment group(s) returned no result")
    return [results[t.index] for t in tasks]
