"""Where the fragments of a partitioned table are processed: the executors' common part.

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

import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...api import StepContext
from ...cleanup import private_folder
from ...errors import AnonflowError, RunError
from ...executor_spec import ExecutorSpec
from ...registry import get_registry
from ...schema import CLASS, ROW
from ...store import Store
from ...table import TypedTable

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
    return int.from_bytes(hashlib.sha256(f"{seed}\0fragment\0{first_fragment}".encode()).digest()[:8], "little")


def _read(files: list[str]) -> Any:
    parts = [pq.ParquetFile(f).read() for f in files]
    data = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    return data.sort_by(ROW).combine_chunks()


def _write(table: Any, path: str) -> None:
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
                          relation=store.relation, registry=registry)
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



class WorkFolder:
    """A private folder the fragments and results of one step travel through: created inside
    ``parent`` (mode 0700, journaled first: :mod:`anonflow.cleanup`), removed afterwards
    whatever happened."""

    def __init__(self, parent: Path, step: str, journal: Any = None) -> None:
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
