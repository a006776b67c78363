"""The Python API: workflows loaded from files or built in code, run by the same engine as
``anonflow run`` (a :class:`~anonflow.session.Session`: the one run sequence), and :func:`anonymize`,
the one-call form for a notebook. ``docs/api.md`` is its guide.

This is the API for *using* anonflow; :mod:`anonflow.api` is the one for writing plugins.

* :func:`load` reads a workflow file into a :class:`Workflow` (``sources=`` puts in-memory
  tables in place of some of its sources, as :meth:`Workflow.run` can); ``Workflow(...)`` and
  :meth:`Workflow.from_dict` build one in code, whose sources may be in-memory tables (pandas
  or polars DataFrames, Arrow tables: :mod:`anonflow.sources.inmemory`).
* :meth:`Workflow.run` returns a :class:`Result` (``run_id``, ``metrics``, ``outputs``,
  ``steps``, and each step's table as Arrow, :meth:`Result.table`), with the CLI's run
  options (``executor``, ``memory``, ``threads``, ``temp_dir``, ``work_dir``, ``progress``);
  :meth:`Workflow.plan` returns what ``anonflow plan --json`` prints.
* Errors are the engine's (:mod:`anonflow.errors`), with the messages the CLI prints.

The store: a run records itself in a DuckDB store, ``db``. The CLI's default is the file
``./anonflow.duckdb``; the API's is an in-memory store (``":memory:"``), nothing written to
disk but the published files, kept open by the :class:`Result` until :meth:`Result.close`
(or until the result is garbage-collected). Give ``db="anonflow.duckdb"`` to record the run
where the CLI does (``anonflow runs`` then lists it) and to reuse earlier steps (the cache).
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence, Union

import yaml

from . import egress
from .steps import for_publication
from .runner.plan import plan_json
from .errors import AnonflowError, InputError, StoreError, WorkflowError
from .sources.inmemory import arrow_sha256, is_table, to_arrow
from .params import ParamError, suggest, validate_params
from .registry import get_registry
from .store import purge_file
from .safeyaml import load_yaml
from .session import Session, TerminalProgress
from .store import Store
from .table import TypedTable
from .workflow.model import MAX_SEED, top_level_keys
from .workflow.spec import WorkflowSpec, load_workflow, read_workflow, workflow_from_data

if TYPE_CHECKING:
    import datetime

    import pandas
    import pyarrow as pa

__all__ = ["Anonymized", "Result", "Workflow", "anonymize", "budget", "load"]

PathLike = Union[str, "os.PathLike[str]"]
#: ``set=``: ``{"grouped.k": 10}`` or ``["grouped.k=10"]`` (the CLI's ``--set`` text)
Overrides = Union[Mapping[str, Any], Iterable[str], None]
#: ``sources=``: source name -> an in-memory table (a pandas or polars DataFrame, an Arrow table)
Sources = Union[Mapping[str, Any], None]
#: the API's default store: in memory, open as long as the run's :class:`Result`
DEFAULT_DB = ":memory:"



def load(path: PathLike, *, sources: Sources = None) -> "Workflow":
    """The workflow file at ``path`` as a :class:`Workflow`; it is validated as ``anonflow plan
    --no-preview`` does (raises :class:`~anonflow.errors.WorkflowError` /
    :class:`~anonflow.errors.InputError` with the CLI's message), and read again at each
    :meth:`~Workflow.run`, as the CLI would.

    ``sources``: in-memory tables (pandas or polars DataFrames, Arrow tables) read in place of
    some of the file's sources, by name, at every run (``{"census": df}``); see
    :meth:`Workflow.run`'s ``sources``."""
    wf = Workflow.__new__(Workflow)
    wf._init(path=Path(path))
    if sources is not None:
        wf._tables, wf._hashes = wf._memory_sources(sources)
    wf.spec()  # fail now on a broken file
    return wf


def _overrides(given: Overrides) -> list[Any]:
    """``set=`` as :func:`~anonflow.workflow.spec.workflow_from_data` takes it: ``--set`` text as it is,
    a mapping's ``"STEP.PARAM": value`` items as parsed ``(step, param, value)`` triples."""
    if given is None:
        return []
    if isinstance(given, str):
        return [given]
    if isinstance(given, Mapping):
        out = []
        for key, value in given.items():
            step, dot, param = str(key).partition(".")
            if not dot or not step.strip() or not param.strip():
                raise WorkflowError(f"set {key!r}: expected 'STEP.PARAM', for example 'grouped.k'")
            out.append((step.strip(), param.strip(), _plain(value, f"set {key!r}")))
        return out
    return [str(o) for o in given]


def _plain(value: Any, where: str) -> Any:
    """``value`` as YAML can write it: mappings with text keys, lists, text, numbers, booleans,
    None (tuples become lists, paths text, NumPy scalars Python numbers)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return _plain(value.item(), where)
    raise WorkflowError(f"{where}: a {type(value).__name__} cannot be written in a workflow (give text, numbers, "
                        "booleans, lists or mappings)")


class Workflow:
    """A workflow: loaded from a file (:func:`load`) or built in code.

    Built in code, from keyword arguments or a mapping shaped like a workflow file
    (:meth:`from_dict`), then extended with :meth:`add_source` and :meth:`add_step` (which
    return the workflow, so calls chain)::

        wf = anonflow.Workflow("census", seed=1, sources={"census": df})
        wf.add_step("typed", "typing", "census", quasi=["AGI", "FICA"])
        wf.add_step("grouped", "mdav", "typed", k=5)

    A source is a path (relative to ``base_dir``, default the current folder when the workflow
    is made), a mapping as in a workflow file (``{"path": ..., "delimiter": ";"}``), or an
    in-memory table: a pandas or polars DataFrame or an Arrow table, converted to Arrow once,
    when added (:func:`anonflow.sources.inmemory.to_arrow`), and recorded by its content hash
    (:func:`anonflow.sources.inmemory.arrow_sha256`). The workflow is validated when it runs or is
    planned, exactly as the same workflow file would be; the text the run records is the
    YAML of :meth:`to_dict`, an in-memory source written ``{format: arrow, sha256: ...}``.

    A workflow object can be run any number of times (with other ``set=``, ``seed=``, ``db=``).
    """

    def __init__(self, name: str = "workflow", *, seed: int = 0, description: str = "",
                 sources: Mapping[str, Any] | None = None, steps: Mapping[str, Any] | None = None,
                 resources: Mapping[str, Any] | None = None, base_dir: PathLike | None = None,
                 retain: str | None = None) -> None:
        self._init(base_dir=base_dir)
        self._data.update(name=name, seed=seed)
        if description:
            self._data["description"] = description
        if retain is not None:
            self._data["retain"] = retain
        if resources is not None:
            self._data["resources"] = dict(resources)
        for sname, source in (sources or {}).items():
            self.add_source(str(sname), source)
        for sname, step in (steps or {}).items():
            if not isinstance(step, Mapping):
                raise WorkflowError(f"step {sname!r}: expected a mapping with 'uses', 'input' and 'with'",
                                    where=self._where)
            self._data["steps"][str(sname)] = dict(step)

    def _init(self, *, path: Path | None = None, base_dir: PathLike | None = None) -> None:
        self._path = path
        self._base = Path(os.path.abspath(base_dir if base_dir is not None else os.getcwd()))
        self._data: dict[str, Any] = {"sources": {}, "steps": {}}
        self._tables: dict[str, Any] = {}
        self._hashes: dict[str, str] = {}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base_dir: PathLike | None = None) -> "Workflow":
        """A workflow from a mapping shaped like a workflow file (``name``, ``seed``,
        ``sources``, ``steps``...); a source may be an in-memory table."""
        if not isinstance(data, Mapping):
            raise WorkflowError(f"expected a mapping with keys name, seed, sources, steps, got {type(data).__name__}")
        keys = top_level_keys()
        unknown = [k for k in data if k not in keys]
        if unknown:
            raise WorkflowError(f"unknown key {unknown[0]!r}{suggest(str(unknown[0]), keys)}; expected one "
                                f"of {', '.join(keys)}", where=f"<{data.get('name') or 'workflow'}>")
        sources = data.get("sources") or {}
        steps = data.get("steps") or {}
        if not isinstance(sources, Mapping) or not isinstance(steps, Mapping):
            raise WorkflowError("'sources' and 'steps' must be mappings", where=f"<{data.get('name') or 'workflow'}>")
        wf = cls(str(data.get("name") or "workflow"), seed=data.get("seed", 0),
                 description=str(data.get("description") or ""), sources=sources, steps=steps,
                 resources=data.get("resources"), base_dir=base_dir, retain=data.get("retain"))
        if data.get("executor") is not None:
            wf._data["executor"] = data["executor"]
        return wf

    # -- building ------------------------------------------------------------------------

    @property
    def _where(self) -> str:
        return str(self._path) if self._path is not None else f"<{self._data.get('name', 'workflow')}>"

    def _editable(self) -> None:
        if self._path is not None:
            raise WorkflowError("a workflow loaded from a file is not changed in Python; use "
                                "anonflow.Workflow.from_dict(wf.to_dict()) for a copy to change, or set= to override "
                                "parameters", where=str(self._path))

    def add_source(self, name: str, source: Any, **options: Any) -> "Workflow":
        """Add (or replace) source ``name``: an in-memory table (pandas or polars DataFrame,
        Arrow table), a path, or a mapping as in a workflow file; ``options`` are the file
        source's keys (``delimiter=";"``, ``na_values=["?"]``...)."""
        self._editable()
        self._tables.pop(name, None)
        self._hashes.pop(name, None)
        if is_table(source):
            if options:
                raise WorkflowError(f"options {', '.join(map(repr, options))} are for file sources; an in-memory "
                                    "table takes none", where=f"{self._where}: source {name!r}")
            table = to_arrow(source, where=f"{self._where}: source {name!r}")
            self._tables[name] = table
            self._hashes[name] = arrow_sha256(table)
            self._data["sources"][name] = table
            return self
        if isinstance(source, Mapping):
            entry = {**source, **options}
        elif isinstance(source, (str, os.PathLike)):
            entry = {"path": os.fspath(source), **options}
        else:
            raise InputError(f"expected a path, a mapping, or a pandas or polars DataFrame or Arrow table, got "
                             f"{type(source).__name__}", where=f"{self._where}: source {name!r}")
        self._data["sources"][name] = entry
        return self

    def add_step(self, name: str, uses: str, input: str | Iterable[str] | None = None, *,
                 after: str | Iterable[str] | None = None, description: str | None = None,
                 params: Mapping[str, Any] | None = None, **kwargs: Any) -> "Workflow":
        """Add (or replace) step ``name`` running ``uses`` (a built-in step or an algorithm)
        on ``input``; its parameters (the file's ``with:``) are ``params`` and the keyword
        arguments (``k=5``; a parameter whose name is not a Python identifier, such as
        ``model_params``'s keys, goes in ``params``)."""
        self._editable()
        step: dict[str, Any] = {"uses": uses}
        if input is not None:
            step["input"] = input if isinstance(input, str) else list(input)
        if after is not None:
            step["after"] = after if isinstance(after, str) else list(after)
        if description:
            step["description"] = description
        merged = {**(params or {}), **kwargs}
        if merged:
            step["with"] = merged
        self._data["steps"][name] = step
        return self

    # -- what it is ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec().name if self._path is not None else str(self._data.get("name"))

    @property
    def path(self) -> Path | None:
        """The workflow file, or None for a workflow built in code."""
        return self._path

    def to_dict(self) -> dict[str, Any]:
        """The workflow as a mapping shaped like its file (in-memory sources as their Arrow
        tables); :meth:`from_dict` takes it back."""
        if self._path is not None:
            data = read_workflow(self._path)[1]
            if not isinstance(data, Mapping):
                raise WorkflowError("expected a mapping with keys name, seed, sources, steps", where=str(self._path))
            out = dict(data)
            if self._tables and isinstance(out.get("sources"), Mapping):
                out["sources"] = {**out["sources"], **self._tables}
            return out
        out = dict(self._data)
        out["sources"] = dict(self._data["sources"])
        out["steps"] = {k: dict(v) for k, v in self._data["steps"].items()}
        return out

    def text(self, *, sources: Sources = None) -> str:
        """The workflow text a run records: a workflow file's text, or the YAML of the
        workflow with each in-memory source written ``{format: arrow, sha256: ...}`` -- for a
        workflow built in code, and for a file whose sources are replaced by in-memory tables
        (``load(path, sources=...)``, or ``sources`` here as :meth:`run` takes it; the file is
        then written again as YAML: its comments and layout are not kept)."""
        return self._text(*self._memory_sources(sources, self._tables, self._hashes))

    def _text(self, tables: Mapping[str, Any], hashes: Mapping[str, str]) -> str:
        def memory(name: str, source: Any) -> Any:
            return {"format": "arrow", "sha256": hashes[name]} if name in tables else source

        if self._path is not None:
            text, data = read_workflow(self._path)
            if not tables or not isinstance(data, Mapping) or not isinstance(data.get("sources"), Mapping):
                return text
            data = {**data, "sources": {n: memory(str(n), s) for n, s in data["sources"].items()}}
            return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100))
        data = dict(self._data)
        data["sources"] = {n: memory(n, s) for n, s in self._data["sources"].items()}
        ordered = {k: data[k] for k in top_level_keys() if k in data}
        return str(yaml.safe_dump(_plain(ordered, self._where), sort_keys=False, allow_unicode=True, width=100))

    def _source_names(self) -> list[str]:
        if self._path is None:
            return list(self._data["sources"])
        data = read_workflow(self._path)[1]
        sources = data.get("sources") if isinstance(data, Mapping) else None
        return [str(n) for n in sources] if isinstance(sources, Mapping) else []

    def _memory_sources(self, given: Sources, tables: Mapping[str, Any] | None = None,
                        hashes: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
        """``tables`` and ``hashes`` with the in-memory tables ``given`` (source name -> table)
        converted to Arrow and hashed; each name must be one of the workflow's sources."""
        out_tables, out_hashes = dict(tables or {}), dict(hashes or {})
        if given is None:
            return out_tables, out_hashes
        if not isinstance(given, Mapping):
            raise InputError(f"sources= expects a mapping of source name -> DataFrame or Arrow table, got "
                             f"{type(given).__name__}", where=self._where)
        names = self._source_names() if given else []
        for name, value in given.items():
            name = str(name)
            where = f"{self._where}: source {name!r}"
            if name not in names:
                raise WorkflowError(f"sources=: the workflow has no source {name!r}{suggest(name, names)}; its "
                                    f"sources: {', '.join(names) or 'none'}", where=self._where)
            if not is_table(value):
                raise InputError(f"sources= takes in-memory tables (a pandas or polars DataFrame, an Arrow table), "
                                 f"got {type(value).__name__}; a file source is named in the workflow", where=where)
            table = to_arrow(value, where=where)
            out_tables[name], out_hashes[name] = table, arrow_sha256(table)
        return out_tables, out_hashes

    def source_hashes(self) -> dict[str, str]:
        """The content hash (:func:`anonflow.sources.inmemory.arrow_sha256`) of each in-memory source."""
        return dict(self._hashes)

    def spec(self, *, set: Overrides = None, seed: int | None = None, sources: Sources = None) -> "WorkflowSpec":
        """The validated :class:`~anonflow.workflow.spec.WorkflowSpec` (``set=``, ``seed=`` and
        ``sources=`` applied), as ``load_workflow`` gives the CLI."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
            raise WorkflowError(f"seed must be an integer from 0 to {MAX_SEED} (2^63 - 1), got {seed!r}")
        overrides = _overrides(set)
        tables, hashes = self._memory_sources(sources, self._tables, self._hashes)
        if self._path is not None and not tables:
            return load_workflow(self._path, overrides, seed)
        text = self._text(tables, hashes)
        if self._path is not None:  # a file with in-memory sources: errors name the file, paths are read beside it
            return workflow_from_data(load_yaml(text), self._path, text, overrides, seed, tables=tables)
        return workflow_from_data(load_yaml(text), Path(self._where), text, overrides, seed, base=self._base,
                                  tables=tables)

    def __repr__(self) -> str:
        where = f" from {self._path}" if self._path is not None else ""
        return f"<anonflow.Workflow {self._data.get('name') if self._path is None else self._path.stem}{where}>"

    # -- planning and running ------------------------------------------------------------

    def plan(self, *, set: Overrides = None, seed: int | None = None, sources: Sources = None,
             preview: bool = True, allow_hosts: Iterable[str] | None = None) -> dict[str, Any]:
        """What ``anonflow plan --json`` prints, as data: ``{"workflow", "seed", "steps"}``.
        With ``preview`` (the default) the preparation steps run on the data in a throw-away
        in-memory store, as ``anonflow plan`` does (``preview=False``: ``--no-preview``);
        ``sources`` and ``allow_hosts`` as :meth:`run` takes them."""
        with egress.use(egress.for_user(allow_hosts, where="allow_hosts")) as policy:
            spec = self.spec(set=set, seed=seed, sources=sources)
            session = Session()
            plan = session.plan(spec, policy=policy)
            return plan_json(plan, session.preview(plan) if preview else {})

    def run(self, *, set: Overrides = None, seed: int | None = None, sources: Sources = None,
            db: PathLike | None = None, out_dir: PathLike | None = None, use_cache: bool = True,
            memory: str | None = None, threads: int | None = None, temp_dir: PathLike | None = None,
            executor: str | Mapping[str, Any] | None = None, work_dir: PathLike | None = None,
            progress: bool = False, retain: str | None = None,
            allow_hosts: Iterable[str] | None = None) -> "Result":
        """Run the workflow as ``anonflow run`` does and return its :class:`Result`.

        ``set``: parameter overrides (``{"grouped.k": 10}``, or the CLI's ``["grouped.k=10"]``);
        ``seed``: the workflow's seed; ``sources``: in-memory tables read in place of the
        sources of those names for this run (``{"census": df}``; over those given to
        :func:`load`): validated and recorded as any in-memory source, by name and content
        hash, never the file; ``db``: the store, by default an in-memory one (see the
        module's docstring), or a file such as ``"anonflow.duckdb"``; ``out_dir``: where
        published files go (default ``out/`` beside the workflow file, or in ``base_dir`` for
        a workflow built in code); ``use_cache``: reuse steps an earlier run of the same store
        computed (``--no-cache`` is ``False``); ``memory``, ``threads``, ``temp_dir``: DuckDB's
        limits and spill folder (``--memory``, ``--threads``, ``--temp-dir``); ``executor``:
        where a partitioned table's fragments run, ``"local"``, ``"processes:N"``,
        ``"dask[:N|:ADDRESS]"`` or a mapping as the workflow's ``executor:`` (``--executor``),
        ``work_dir`` the folder the fragments travel through (``--work-dir``); ``progress``:
        the CLI's step lines and progress bars on stderr; ``retain``: what the store keeps of
        the run's tables, ``"all"``, ``"published"`` or ``"none"`` (``--retain``; default the
        workflow's ``retain:``); ``allow_hosts``: hosts other than this machine that PostgreSQL
        sources and sinks may reach (``--allow-host``; the workflow never allows one on its
        own, docs/egress.md). A failed run raises
        :class:`~anonflow.errors.RunError` (``exc.run_id`` names its record), invalid input
        :class:`~anonflow.errors.InputError` / :class:`~anonflow.errors.WorkflowError`."""
        with egress.use(egress.for_user(allow_hosts, where="allow_hosts")):
            return self._run(set=set, seed=seed, sources=sources, db=db, out_dir=out_dir, use_cache=use_cache,
                             memory=memory, threads=threads, temp_dir=temp_dir, executor=executor,
                             work_dir=work_dir, progress=progress, retain=retain)

    def _run(self, *, set: Overrides, seed: int | None, sources: Sources, db: PathLike | None,
             out_dir: PathLike | None, use_cache: bool, memory: str | None, threads: int | None,
             temp_dir: PathLike | None, executor: str | Mapping[str, Any] | None, work_dir: PathLike | None,
             progress: bool, retain: str | None) -> "Result":
        spec = self.spec(set=set, seed=seed, sources=sources)
        resources, chosen = Session.settings(memory=memory, threads=threads, temp_dir=temp_dir, executor=executor,
                                             work_dir=work_dir, spec=spec)
        db_path = DEFAULT_DB if db is None else os.fspath(db)
        # the CLI's progress lines (duck-typed as a Reporter)
        session = Session(db_path, reporter=TerminalProgress(enabled=True) if progress else None)
        plan = session.plan(spec)
        store = session.open_store()
        try:
            run = session.run(spec, plan=plan, store=store, use_cache=use_cache,
                              output_dir=Path(out_dir) if out_dir is not None else None, retain=retain,
                              resources=resources, executor=chosen)
        except BaseException:
            store.close()
            raise
        kept: Store | None = store  # an in-memory store lives with the result; a file is reopened to read
        if db_path != DEFAULT_DB:
            store.close()
            kept = None
        return Result(run_id=run.run_id, status=run.status, workflow=run.workflow, metrics=dict(run.metrics),
                      outputs=list(run.outputs), steps=list(run.steps), db=db_path, store=kept)


class Result:
    """A finished run: ``run_id``, ``status`` (``"succeeded"``: a failed run raises),
    ``workflow`` (its name), ``metrics`` (``"step.metric"`` -> value), ``outputs`` (each
    published file's ``path``, ``sha256`` and ``rows``), ``steps`` (each step's ``step``,
    ``kind``, ``uses``, ``status``, ``rows``, ``seconds``, ``notes``; ``suppressed``, ``perturbs`` and
    ``privacy_loss`` (the differential privacy it spent) where the step has them), ``db`` (the store) --
    what ``anonflow run --json`` prints -- and each step's table, :meth:`table`.

    With an in-memory store the result holds it open: :meth:`close` (or ``with``) frees it
    (it is freed when the result is garbage-collected, too). With a store file, each
    :meth:`table` opens it read-only for the time of the read."""

    def __init__(self, *, run_id: str, status: str, workflow: str, metrics: dict[str, float],
                 outputs: list[dict[str, Any]], steps: list[dict[str, Any]], db: str,
                 store: "Store | None" = None) -> None:
        self.run_id = run_id
        self.status = status
        self.workflow = workflow
        self.metrics = metrics
        self.outputs = outputs
        self.steps = steps
        self.db = db
        self._store = store
        self._closer = weakref.finalize(self, store.close) if store is not None else None

    def __repr__(self) -> str:
        return f"<anonflow.Result run {self.run_id}: {self.workflow} {self.status}, {len(self.metrics)} metrics>"

    def to_json(self) -> dict[str, Any]:
        """What ``anonflow run --json`` prints."""
        return {"run_id": self.run_id, "status": self.status, "workflow": self.workflow, "metrics": self.metrics,
                "outputs": self.outputs, "steps": self.steps, "error": None}

    def close(self) -> None:
        """Close the in-memory store (its tables are gone); nothing to do for a store file."""
        if self._closer is not None:
            self._closer()

    def __enter__(self) -> "Result":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _open(self) -> tuple["Store", bool]:
        if self._store is not None:
            if self._closer is not None and not self._closer.alive:
                raise StoreError(f"the in-memory store of run {self.run_id} is closed: its tables are gone")
            return self._store, False
        return Store(self.db, read_only=True), True

    def table(self, step: str) -> "pa.Table":
        """The table step (or source) ``step`` produced, as a ``pyarrow.Table`` in the store's
        order, with anonflow's columns: ``_row`` (the record's source position) and, after an
        algorithm, ``_class`` (its equivalence class). A publish step writes it ordered by
        class and without ``_row``; this is the step's table as the next step reads it."""
        store, opened = self._open()
        try:
            rec = store.step_in_run(self.run_id, step)
            if rec is None:
                names = [s["step"] for s in store.steps(self.run_id)]
                raise InputError(f"run {self.run_id} has no step {step!r}{suggest(step, names)}; its steps: "
                                 f"{', '.join(names)}")
            if not rec.get("output_table"):
                raise InputError(f"step {step!r} ({rec['kind']}: {rec['uses']}) produces no table")
            return store.data(rec["output_table"])
        finally:
            if opened:
                store.close()

    def to_pandas(self, step: str) -> "pandas.DataFrame":
        """:meth:`table` as a pandas DataFrame (needs pandas)."""
        return self.table(step).to_pandas()

    def to_polars(self, step: str) -> Any:
        """:meth:`table` as a polars DataFrame (needs polars)."""
        import polars

        return polars.from_arrow(self.table(step))


class Anonymized:
    """What :func:`anonymize` returns: ``table``, the anonymized records as a ``pyarrow.Table``
    as a publish step writes them (ordered by class, then by their values; no ``_row``;
    ``_class`` is each record's equivalence class), ``metrics`` (``"scores.<metric>"`` ->
    value), ``run_id``, and ``result``, the whole run's :class:`Result` (every step's table,
    e.g. ``result.table("typed")``)."""

    def __init__(self, table: "pa.Table", result: Result, suppressed: int | None = None) -> None:
        self.table = table
        self.result = result
        self.metrics = result.metrics
        self.run_id = result.run_id
        #: records the algorithm suppressed (not in ``table``), for an algorithm that may
        self.suppressed = suppressed

    def __repr__(self) -> str:
        return f"<anonflow.Anonymized {self.table.num_rows} records, run {self.run_id}>"

    def to_pandas(self) -> "pandas.DataFrame":
        return self.table.to_pandas()

    def to_polars(self) -> Any:
        import polars

        return polars.from_arrow(self.table)


def _default_metrics(algorithm: str, params: Mapping[str, Any]) -> list[Any]:
    """``k-anonymity`` plus every model the algorithm claims for ``params`` (each with the
    claimed parameters, so the evaluate step checks it); just ``k-anonymity`` when the
    parameters are not valid (the run then says why)."""
    registry = get_registry()
    claims: dict[str, Any] = {}
    if registry.has("algorithm", algorithm):
        algo = registry.get("algorithm", algorithm).obj
        try:
            claims = dict(algo.claims(validate_params(algo.params, dict(params))) or {})
        except (ParamError, AnonflowError, KeyError, TypeError, ValueError):
            claims = {}
    out: list[Any] = [] if "k-anonymity" in claims else ["k-anonymity"]
    for model, given in claims.items():
        if registry.has("metric", model):
            out.append({model: dict(given)} if given else model)
    return out


def purge(db: PathLike, *, everything: bool = False, runs: Sequence[str] | None = None,
          older_than: "str | datetime.timedelta | None" = None, keep: str = "published",
          dry_run: bool = False) -> dict[str, Any]:
    """Remove the records of sources and intermediate tables from the store file ``db``, as
    ``anonflow purge`` does (:mod:`anonflow.store.purge`; docs/store.md): ``everything=True``
    (``--all``), ``runs`` (``--run``), or ``older_than`` (``--older-than``: ``"30d"`` or a
    ``timedelta``); ``keep="published"`` (default) or ``"none"``; ``dry_run`` changes nothing.
    The lineage and every hash are kept, and the store is rewritten into a fresh file. Returns
    what ``anonflow purge --json`` prints (``tables``, ``rows``, ``runs``, sizes...)."""
    return purge_file(os.fspath(db), everything=everything, runs=runs, older_than=older_than, keep=keep,
                      dry_run=dry_run)


def budget(db: PathLike, source: str | None = None) -> list[dict[str, Any]]:
    """The differential privacy each source has spent, from the privacy ledger of the store file
    ``db``, as ``anonflow budget --json`` prints it: per source its ``budget`` (as the latest
    workflow that declared one states it), ``spent`` (composed by OpenDP, the composition
    named), ``left`` and its ``charges``. ``source``: a source's name or a prefix of its content
    hash (default: every source the ledger knows). docs/differential-privacy.md."""
    return Session(os.fspath(db)).budgets(source)


def anonymize(data: Any, algorithm: str = "mdav", *, quasi: Any, sensitive: Any = None, label: Any = None,
              insensitive: Any = None, identifier: Any = None, weight: str | None = None, others: str | None = None,
              missing: str | None = None, missing_values: list[str] | None = None,
              not_missing: list[str] | None = None, hierarchies: Mapping[str, Any] | None = None,
              metrics: Any = None, seed: int = 0, db: PathLike | None = None, base_dir: PathLike | None = None,
              **params: Any) -> Anonymized:
    """Anonymize one table in one call and return an :class:`Anonymized`.

    ``data``: a pandas or polars DataFrame or an Arrow table. It builds and runs this workflow
    (the same engine as any other run)::

        sources:  {data: <the table>}
        steps:
          typed:      {uses: typing, input: data, with: {quasi: ..., sensitive: ..., ...}}
          hier:       {uses: hierarchy, input: typed, with: <hierarchies>}   # only if given
          anonymized: {uses: <algorithm>, input: hier or typed, with: <params>}
          scores:     {uses: evaluate, input: [hier or typed, anonymized], with: {metrics: <metrics>}}

    ``quasi`` ... ``not_missing`` are the typing step's parameters (those left None take its
    defaults); ``hierarchies`` the hierarchy step's (column -> builder, e.g. ``{"age":
    {"arx": "age.csv"}}``, files relative to ``base_dir``); the remaining keyword arguments are
    the algorithm's parameters (``k=5``; ``model_params={"k": 5}`` for ``lattice``).
    ``metrics`` defaults to ``k-anonymity`` plus each privacy model the algorithm claims,
    checked with the claimed parameters. ``seed`` is the workflow's; ``db`` the store (default:
    in memory, see :meth:`Workflow.run`). Invalid input raises
    :class:`~anonflow.errors.InputError` or :class:`~anonflow.errors.WorkflowError`, a failed
    run :class:`~anonflow.errors.RunError`."""
    typing: dict[str, Any] = {"quasi": quasi}
    for key, value in (("sensitive", sensitive), ("label", label), ("insensitive", insensitive),
                       ("identifier", identifier), ("weight", weight), ("others", others), ("missing", missing),
                       ("missing_values", missing_values), ("not_missing", not_missing)):
        if value is not None:
            typing[key] = value
    wf = Workflow("anonymize", seed=seed, sources={"data": data}, base_dir=base_dir)
    wf.add_step("typed", "typing", "data", params=typing)
    prepared = "typed"
    if hierarchies:
        wf.add_step("hier", "hierarchy", "typed", params=dict(hierarchies))
        prepared = "hier"
    wf.add_step("anonymized", algorithm, prepared, params=params)
    wf.add_step("scores", "evaluate", [prepared, "anonymized"],
                params={"metrics": metrics if metrics is not None else _default_metrics(algorithm, params)})
    result = wf.run(db=db)
    try:
        table, suppressed = _published(result)
    except BaseException:
        result.close()
        raise
    return Anonymized(table, result, suppressed)


def _published(result: Result) -> tuple["pa.Table", int | None]:
    """The ``anonymized`` step's records as a publish step writes them, and how many were
    suppressed (None when the algorithm does not suppress)."""
    store, opened = result._open()
    try:
        rec = store.step_in_run(result.run_id, "anonymized")
        if rec is None or not rec.get("output_table"):
            raise StoreError(f"run {result.run_id} recorded no table for its step 'anonymized'")
        stored = store.get(rec["output_table"])
        table = for_publication(TypedTable(store.data(rec["output_table"]), stored.typing, stored.claims)).data
        suppressed = (rec.get("summary") or {}).get("suppressed")
        return table, suppressed
    finally:
        if opened:
            store.close()
