"""Loading a declarative workflow file into a :class:`WorkflowSpec`.

This module knows the file format only: it checks structure and spelling, applies
``--set`` overrides and resolves paths. The graph is built and checked in
:mod:`anonflow.runner.plan`; nothing here touches data or the store.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from .errors import InputError, WorkflowError
from .executor_spec import ExecutorSpec, executor_spec
from .params import suggest
from . import workflow_schema as _schema
from .workflow_schema import Marks, check_workflow

#: the memory size pattern and the other declarations of the file format live in
#: anonflow.workflow_schema; these names are kept for the modules that import them from here
MEMORY_SIZE = _schema.MEMORY_SIZE
RETAIN = _schema.RETAIN
FORMATS = _schema.FORMATS
IN_MEMORY = _schema.IN_MEMORY


@dataclass(frozen=True)
class SourceSpec:
    """A named input table: a CSV or Parquet file, a table in a DuckDB database, a table or
    query of a PostgreSQL database (``options``: ``postgres``, the URL; ``query``), or (format
    ``arrow``, from the Python API only) an in-memory Arrow table: ``data`` holds it and
    ``sha256`` its content hash (:func:`anonflow.memtable.arrow_sha256`), which the run
    records in place of a file's."""

    name: str
    format: str
    path: Path | None = None
    table: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    data: Any = field(default=None, compare=False, repr=False)
    sha256: str | None = None

    @property
    def in_memory(self) -> bool:
        return self.format == IN_MEMORY

    def describe(self) -> str:
        if self.in_memory:
            return f"in-memory table {self.name} (sha256 {str(self.sha256)[:16]}...)"
        if self.format == "postgres":
            query = self.options.get("query")
            what = f"table {self.table}" if query is None else f"query {' '.join(str(query).split())!r}"
            return f"{what} of {self.options['postgres']}"
        if self.format == "duckdb":
            return f"table {self.table}" + (f" in {self.path}" if self.path else "")
        return str(self.path)


@dataclass(frozen=True)
class StepSpec:
    """One step: a built-in (typing, evaluate, publish) or an algorithm plugin."""

    name: str
    uses: str
    inputs: tuple[str, ...]
    params: dict[str, Any]
    after: tuple[str, ...] = ()
    index: int = 0


@dataclass(frozen=True)
class Resources:
    """What the store's DuckDB may use: ``memory`` (its memory limit, e.g. ``2GB``; beyond it
    DuckDB spills to disk), ``threads``, and ``temp_directory`` (where it spills: anonflow
    makes an owner-only folder of its own inside, removed when the run ends). None: DuckDB's
    defaults (80 % of the machine's memory, one thread per core, the system's temp folder)."""

    memory: str | None = None
    threads: int | None = None
    temp_directory: Path | None = None

    def merged(self, other: "Resources") -> "Resources":
        """These settings with ``other``'s given ones in their place (CLI flags over the file)."""
        return Resources(other.memory or self.memory, other.threads or self.threads,
                         other.temp_directory or self.temp_directory)

    def to_json(self) -> dict[str, Any]:
        return {"memory": self.memory, "threads": self.threads,
                "temp_directory": None if self.temp_directory is None else str(self.temp_directory)}


def check_memory(value: Any, where: str) -> str:
    """A memory size (``2GB``, ``512MB``, ``1.5GiB``) or a one-line error."""
    if isinstance(value, bool) or not isinstance(value, str) or not MEMORY_SIZE.match(value):
        raise WorkflowError(f"resources.memory must be a size such as 2GB or 512MB, got {value!r}", where=where)
    return value.strip().replace(" ", "")


def check_threads(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
        raise WorkflowError(f"resources.threads must be an integer from 1 to 1024, got {value!r}", where=where)
    return value


@dataclass(frozen=True)
class WorkflowSpec:
    name: str
    seed: int
    sources: dict[str, SourceSpec]
    steps: dict[str, StepSpec]
    path: Path
    text: str
    overrides: tuple[tuple[str, str, Any], ...] = ()
    description: str = ""
    resources: Resources = field(default_factory=Resources)
    executor: ExecutorSpec = field(default_factory=ExecutorSpec)
    #: what the store keeps of the run's tables once it ends: ``all``, ``published`` (the
    #: published tables; sources and intermediate steps are purged) or ``none``
    retain: str = "all"
    #: the folder relative paths are read from, when ``path`` names no file (a workflow built
    #: in Python, whose ``path`` is ``<NAME>``); None: the workflow file's folder
    base: Path | None = None

    @property
    def base_dir(self) -> Path:
        return self.base if self.base is not None else self.path.parent

    @property
    def text_hash(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def where(self, *parts: str) -> str:
        """An error location such as ``census.yaml: step 'grouped'``."""
        return ": ".join((str(self.path), *parts))


def _err(path: Path, message: str, *parts: str) -> WorkflowError:
    return WorkflowError(message, where=": ".join((str(path), *parts)))


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping key given twice (PyYAML keeps the last one
    silently: a step written twice, or ``k: 5`` then ``k: 2``, would run the wrong workflow)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: let PyYAML report it
            continue
        if first is not None:
            raise DuplicateKeyError(key, first, key_node.start_mark)
        seen[key] = key_node.start_mark
    data = loader.construct_mapping(node, deep=deep)
    marks = getattr(loader, "anonflow_marks", None)
    if marks is not None:  # where each key is, for the schema's one-line errors
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            try:
                lines.setdefault(loader.construct_object(key_node, deep=deep), key_node.start_mark.line + 1)
            except TypeError:
                pass
        marks.add(data, lines, node.start_mark.line + 1)
    return data


def _construct_marked_sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> Any:
    data: list[Any] = []
    marks = getattr(loader, "anonflow_marks", None)
    if marks is not None:
        marks.add(data, [item.start_mark.line + 1 for item in node.value], node.start_mark.line + 1)
    yield data
    data.extend(loader.construct_sequence(node))


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: Any, first: Any, mark: Any) -> None:
        super().__init__(f"key {key!r} appears twice (first at line {first.line + 1})")
        self.key, self.first, self.mark = key, first, mark


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)
_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_marked_sequence)


#: the largest workflow seed (the store keeps it as a signed 64-bit integer)
MAX_SEED = _schema.MAX_SEED
#: the largest workflow file read (bytes)
MAX_WORKFLOW_BYTES = 10 * 1024 * 1024

#: the most values a workflow file may hold once its aliases are expanded (a YAML "billion
#: laughs" file is a few lines that expand to billions of values)
MAX_VALUES = 1_000_000


class TooLargeError(yaml.YAMLError):
    pass


#: the deepest nesting of lists and mappings a workflow value may have
MAX_DEPTH = 64


def _expanded_size(data: Any, budget: int) -> int:
    """Count the values of ``data`` as if every alias were written out, stopping past ``budget``
    values or :data:`MAX_DEPTH` levels of nesting."""
    count, stack = 0, [(data, 0)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > budget:
            raise TooLargeError(f"it expands to more than {budget:,} values (aliases of aliases); write the values out")
        if depth > MAX_DEPTH:
            raise TooLargeError(f"it nests lists or mappings more than {MAX_DEPTH} deep")
        if isinstance(item, dict):
            stack.extend((k, depth + 1) for k in item.keys())
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)
    return count


def load_yaml(text: str) -> Any:
    """Parse YAML text, refusing duplicate keys and alias bombs (raises ``yaml.YAMLError``)."""
    return load_yaml_marked(text)[0]


def load_yaml_marked(text: str) -> tuple[Any, Marks]:
    """:func:`load_yaml`, and where each key and list item of the file is (:class:`Marks`)."""
    marks = Marks()
    loader = _UniqueKeyLoader(text)
    loader.anonflow_marks = marks  # type: ignore[attr-defined]
    try:
        data = loader.get_single_data()
    finally:
        loader.dispose()
    _expanded_size(data, MAX_VALUES)
    return data, marks


def parse_override(text: str) -> tuple[str, str, Any]:
    """Parse ``STEP.PARAM=VALUE`` (VALUE is read as YAML, so ``k=10`` is an integer)."""
    key, sep, raw = text.partition("=")
    step, dot, param = key.partition(".")
    if not sep or not dot or not step or not param:
        raise WorkflowError(f"--set {text!r}: expected STEP.PARAM=VALUE, for example grouped.k=10")
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except (DuplicateKeyError, TooLargeError) as exc:
        raise WorkflowError(f"--set {text[:80]!r}: {exc}") from None
    except RecursionError:
        raise WorkflowError(f"--set {text[:80]!r}: the value nests lists or mappings too deeply") from None
    except yaml.YAMLError:
        value = raw
    return step.strip(), param.strip(), value


def _set_path(path: Path, params: dict[str, Any], step: str, param: str, value: Any) -> None:
    """Apply ``--set STEP.A.B=VALUE``: a dotted name reaches into mapping parameters
    (``lattice.model_params.k=7``), creating the mapping when the parameter is unset."""
    if param in params:
        params[param] = value
        return
    keys = param.split(".")
    target = params
    for i, key in enumerate(keys[:-1]):
        current = target.get(key)
        if current is None:
            current = {}
        elif not isinstance(current, Mapping):
            raise WorkflowError(f"--set {step}.{param}: {step}.{'.'.join(keys[:i + 1])} is {current!r}, not a "
                                "mapping, so it has no key " + repr(keys[i + 1]), where=str(path))
        target[key] = current = dict(current)
        target = current
    target[keys[-1]] = value


def load_workflow(path: str | Path, overrides: Iterable[str] = (), seed: int | None = None) -> WorkflowSpec:
    """Read and validate a workflow file (:mod:`anonflow.workflow_schema`, before anything
    else reads it); apply ``--set`` and ``--seed``."""
    path = Path(path)
    text, data, marks = _read(path)
    return workflow_from_data(data, path, text, overrides, seed, marks=marks)


def read_workflow(path: Path) -> tuple[str, Any]:
    """A workflow file's text and its parsed YAML, checked against the file format, with the
    CLI's errors."""
    text, data, _ = _read(path)
    return text, data


def _read(path: Path) -> tuple[str, Any, Marks]:
    if not path.exists():
        raise WorkflowError(f"workflow file not found: {path}")
    if not path.is_file():  # a folder, device (/dev/zero never ends) or FIFO (blocks)
        raise WorkflowError(f"workflow file {path} is not a regular file")
    if path.stat().st_size > MAX_WORKFLOW_BYTES:
        raise WorkflowError(f"workflow file {path} is {path.stat().st_size:,} bytes; a workflow file holds at most "
                            f"{MAX_WORKFLOW_BYTES:,} (data belongs in sources)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkflowError(f"cannot read workflow file {path}: {exc}") from None
    data, marks = _parse(path, text)
    check_workflow(data, str(path), marks)
    return text, data, marks


def _parse(path: Path, text: str) -> tuple[Any, Marks]:
    try:
        return load_yaml_marked(text)
    except DuplicateKeyError as exc:
        raise _err(path, f"line {exc.mark.line + 1}, column {exc.mark.column + 1}: {exc}; "
                         "each step, source and parameter may be given once") from None
    except TooLargeError as exc:
        raise _err(path, f"refused: {exc}") from None
    except RecursionError:
        raise _err(path, "refused: it nests lists or mappings too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise _err(path, f"{loc}not valid YAML ({problem})") from None


def workflow_from_data(data: Any, path: Path, text: str, overrides: Iterable[Any] = (), seed: int | None = None,
                       *, base: Path | None = None, tables: Mapping[str, Any] | None = None,
                       marks: Marks | None = None) -> WorkflowSpec:
    """Validate a parsed workflow (the mapping a workflow file holds) into a
    :class:`WorkflowSpec`; apply ``--set`` overrides (``"STEP.PARAM=VALUE"`` text, or
    ``(step, param, value)`` triples already parsed) and ``--seed``.

    ``path`` names the file (in error messages, and its folder reads relative paths unless
    ``base`` is given); ``text`` is what the run records as the workflow's text. ``tables``
    holds the Arrow tables of in-memory sources (``{format: arrow, sha256: ...}`` in ``data``,
    keyed by source name): the Python API's; a workflow file names none. ``marks`` (from
    :func:`load_yaml_marked`) puts the line of the offending key in a format error."""
    check_workflow(data, str(path), marks)  # the file's format, before anything else reads it
    name = data.get("name") or path.stem
    if len(name) > 200 or not name.isprintable():  # the file's stem; a newline would forge terminal lines
        raise _err(path, "'name' must be one line of printable characters (at most 200), got "
                         f"{name[:60]!r}{'...' if len(name) > 60 else ''}")
    wf_seed = data.get("seed", 0) if seed is None else seed
    if isinstance(wf_seed, bool) or not isinstance(wf_seed, int) or not 0 <= wf_seed <= MAX_SEED:
        raise _err(path, f"'seed' must be an integer from 0 to {MAX_SEED} (2^63 - 1), got {wf_seed!r}")
    retain = data.get("retain", "all")

    base_dir = base if base is not None else path.resolve().parent
    raw_sources = data.get("sources") or {}
    sources = {str(n): _source(path, base_dir, str(n), s, tables or {}) for n, s in raw_sources.items()}

    raw_steps = data["steps"]
    steps: dict[str, StepSpec] = {}
    for i, (sname, sdata) in enumerate(raw_steps.items()):
        sname = str(sname)
        if sname in sources:
            raise _err(path, "a step and a source have the same name; names must be unique", f"step {sname!r}")
        steps[sname] = _step(path, sname, sdata, i)

    parsed = [parse_override(o) if isinstance(o, str) else tuple(o) for o in overrides]
    for step, param, value in parsed:
        if step not in steps:
            raise WorkflowError(f"--set {step}.{param}: no step named {step!r}{suggest(step, steps)}", where=str(path))
        _set_path(path, steps[step].params, step, param, value)
    if parsed:  # the overridden parameters are held to the file format too
        changed = {**data, "steps": {**raw_steps, **{n: {**raw_steps[n], "with": steps[n].params}
                                                       for n in dict.fromkeys(s for s, _, _ in parsed)}}}
        check_workflow(changed, str(path), prefix="with --set " + " ".join(f"{s}.{p}" for s, p, _ in parsed))

    return WorkflowSpec(name=name, seed=int(wf_seed), sources=sources, steps=steps, path=path,
                        text=text, overrides=tuple(parsed), description=str(data.get("description") or ""),
                        resources=_resources(path, base_dir, data.get("resources")),
                        executor=_executor(path, base_dir, data.get("executor")), base=base, retain=retain)


def _executor(path: Path, base: Path, data: Any) -> ExecutorSpec:
    """The ``executor:`` block. A workflow file may come from someone else: it may not name a
    Dask scheduler at all (whatever listens there receives the records; only ``--executor``
    may name one: :func:`anonflow.egress.check_scheduler`), nor write its fragments outside
    the workflow's folder (only ``--work-dir`` may name any folder)."""
    if data is None:
        return ExecutorSpec()
    where = f"{path}: executor"
    try:
        spec = executor_spec(data, where)
    except InputError as exc:
        raise WorkflowError(exc.message, where=where) from None
    if spec.address is not None:
        from .egress import check_scheduler

        try:
            check_scheduler(spec.address, named_by_user=False, where=where)
        except InputError as exc:
            raise WorkflowError(exc.message, where=where) from None
    if spec.work_dir is not None:
        raw = spec.work_dir
        work = (base / raw).resolve()
        if Path(raw).is_absolute() or not work.is_relative_to(base):
            raise WorkflowError(f"work_dir {raw!r} lies outside the workflow's folder; give a folder inside it, or "
                                "name any folder with --work-dir", where=where)
        spec = ExecutorSpec(spec.kind, spec.workers, spec.address, str(work))
    return spec


def _resources(path: Path, base: Path, data: Any) -> Resources:
    """The ``resources:`` block (its format checked by the schema). A workflow file may come
    from someone else, so its spill folder must lie inside the workflow's own folder
    (``--temp-dir`` can name any folder)."""
    if data is None:
        return Resources()
    where = f"{path}: resources"
    memory = check_memory(data["memory"], where) if data.get("memory") is not None else None
    threads = check_threads(data["threads"], where) if data.get("threads") is not None else None
    temp = None
    if data.get("temp_directory") is not None:
        raw = data["temp_directory"]
        if not raw.strip():
            raise WorkflowError(f"temp_directory must be a folder path, got {raw!r}", where=where)
        temp = (base / raw).resolve()
        if Path(raw).is_absolute() or not temp.is_relative_to(base):
            raise WorkflowError(f"temp_directory {raw!r} lies outside the workflow's folder; give a folder inside "
                                "it, or name any folder with --temp-dir", where=where)
    return Resources(memory, threads, temp)


def _source(path: Path, base: Path, name: str, data: Any, tables: Mapping[str, Any]) -> SourceSpec:
    """One source (its format checked by the schema: keys, types, which kind)."""
    where = f"source {name!r}"
    if isinstance(data, str):
        data = {"path": data}
    if data.get("postgres") is not None or data.get("format") == "postgres":
        return _postgres_source(path, name, data, where)
    fmt = data.get("format")
    if fmt == IN_MEMORY or "sha256" in data:
        if fmt != IN_MEMORY or name not in tables:
            raise _err(path, f"an in-memory table (format {IN_MEMORY}, sha256) is given in Python, not in a workflow "
                             "file: pass the DataFrame or Arrow table in Python (anonflow.Workflow, or "
                             "run(sources={NAME: table}) on a loaded workflow)", where)
        return SourceSpec(name=name, format=IN_MEMORY, data=tables[name], sha256=str(data.get("sha256")))
    file = data.get("path") if data.get("path") is not None else data.get("db")
    resolved = (base / str(file)).resolve() if file is not None else None
    if fmt is None:
        if data.get("table") is not None:
            fmt = "duckdb"
        elif file is not None:
            suffix = Path(str(file)).suffix.lower()
            fmt = {".csv": "csv", ".tsv": "csv", ".txt": "csv", ".parquet": "parquet", ".pq": "parquet",
                   ".duckdb": "duckdb", ".db": "duckdb"}.get(suffix)
            if fmt is None:
                raise _err(path, f"cannot tell the format of {file!r} from its extension; add format: csv|parquet|duckdb", where)
        else:
            raise _err(path, "a source needs 'path' (a CSV or Parquet file) or 'table' (a DuckDB table)", where)
    if fmt == "duckdb" and not data.get("table"):
        raise _err(path, "a DuckDB source needs 'table'", where)
    options = {k: data[k] for k in ("delimiter", "header", "quote", "na_values", "types") if data.get(k) is not None}
    if "na_values" in options:
        na = options["na_values"]
        options["na_values"] = [na] if isinstance(na, str) else list(na)
    return SourceSpec(name=name, format=fmt, path=resolved, table=data.get("table"), options=options)


def _postgres_source(path: Path, name: str, data: Mapping, where: str) -> SourceSpec:
    """``{postgres: URL, table: NAME}`` or ``{postgres: URL, query: SELECT ...}`` (anonflow.postgres)."""
    from .postgres import url_problem

    from .postgres import check_timeout

    problem = url_problem(data.get("postgres"))
    if problem is not None:  # never repeated: it may hold a password
        raise _err(path, f"'postgres' {problem}", where)
    table, query = data.get("table"), data.get("query")
    if (table is None) == (query is None):
        raise _err(path, "a postgres source needs 'table' (NAME or SCHEMA.NAME) or 'query' (a SELECT), not both", where)
    for key, value in (("table", table), ("query", query)):
        if value is not None and not value.strip():
            raise _err(path, f"'{key}' must be a non-empty string, got {value!r}", where)
    options: dict[str, Any] = {"postgres": data["postgres"]}
    if query is not None:
        options["query"] = query
    if data.get("timeout") is not None:  # the query's statement_timeout on the server
        try:
            check_timeout(data["timeout"])
        except InputError as exc:
            raise _err(path, exc.message, where) from None
        options["timeout"] = data["timeout"]
    return SourceSpec(name=name, format="postgres", table=table, options=options)


def _step(path: Path, name: str, data: Any, index: int) -> StepSpec:
    """One step (its format checked by the schema)."""
    inputs = data.get("input") or ()
    inputs = (inputs,) if isinstance(inputs, str) else tuple(inputs)
    after = data.get("after") or ()
    after = (after,) if isinstance(after, str) else tuple(after)
    return StepSpec(name=name, uses=data["uses"], inputs=inputs, params=dict(data.get("with") or {}), after=after,
                    index=index)
