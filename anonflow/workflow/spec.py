"""Loading a declarative workflow file into a :class:`WorkflowSpec`.

This module knows the file format only: it checks structure and spelling (against
:mod:`anonflow.workflow.model`), applies ``--set`` overrides and resolves paths. The graph is
built and checked in :mod:`anonflow.runner.plan`; nothing here touches data or the store.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from .. import sources as _sources
from ..egress import check_scheduler
from ..errors import InputError, WorkflowError
from ..executor_spec import ExecutorSpec, executor_spec
from ..params import suggest
from ..safeyaml import DuplicateKeyError, Marks, TooLargeError, load_yaml, load_yaml_marked
from ..sourcekind import SourceSpec
from ..store import Resources
from .checking import check_workflow
from .model import MAX_SEED, MEMORY_SIZE


@dataclass(frozen=True)
class StepSpec:
    """One step: a built-in (typing, evaluate, publish) or an algorithm plugin."""

    name: str
    uses: str
    inputs: tuple[str, ...]
    params: dict[str, Any]
    after: tuple[str, ...] = ()
    index: int = 0


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
    #: the differential-privacy budget each source declares (``budget:``): source name ->
    #: ``{"epsilon", "delta"}`` (anonflow.runner.privacy_budget)
    budgets: dict[str, dict[str, float]] = field(default_factory=dict)

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


#: the largest workflow seed (the store keeps it as a signed 64-bit integer)
#: the largest workflow file read (bytes)
MAX_WORKFLOW_BYTES = 10 * 1024 * 1024


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


def apply_recorded_overrides(spec: WorkflowSpec, overrides: Iterable[Any]) -> WorkflowSpec:
    """``spec`` with a recorded run's ``--set`` values (``(step, param, value)``) applied to its
    steps' parameters as that run applied them, and recorded as its overrides (a re-run of a
    release: ``anonflow verify --rerun``). A value for a step the workflow lacks is refused."""
    parsed = tuple(tuple(o) for o in overrides)
    for step, param, value in parsed:
        if step not in spec.steps:
            raise InputError(f"override {step}.{param}: the workflow has no step {step!r}")
        _set_path(spec.path, spec.steps[step].params, step, param, value)
    return dataclasses.replace(spec, overrides=parsed)


def load_workflow(path: str | Path, overrides: Iterable[str] = (), seed: int | None = None) -> WorkflowSpec:
    """Read and validate a workflow file (:mod:`anonflow.workflow.model`, before anything
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
    budgets = {str(n): {"epsilon": float(s["budget"]["epsilon"]), "delta": float(s["budget"].get("delta") or 0.0)}
               for n, s in raw_sources.items() if isinstance(s, Mapping) and s.get("budget") is not None}
    sources = {str(n): _source(path, base_dir, str(n), {k: v for k, v in s.items() if k != "budget"}
                               if isinstance(s, Mapping) else s, tables or {}) for n, s in raw_sources.items()}

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
                        executor=_executor(path, base_dir, data.get("executor")), base=base, retain=retain,
                        budgets=budgets)


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
    """One source (its format checked by the schema: keys, types, which kind), parsed by its
    kind (:mod:`anonflow.sources`)."""
    try:
        return _sources.parse(name, data, base, tables)
    except WorkflowError as exc:
        raise _err(path, exc.message, f"source {name!r}") from None


def _step(path: Path, name: str, data: Any, index: int) -> StepSpec:
    """One step (its format checked by the schema)."""
    inputs = data.get("input") or ()
    inputs = (inputs,) if isinstance(inputs, str) else tuple(inputs)
    after = data.get("after") or ()
    after = (after,) if isinstance(after, str) else tuple(after)
    return StepSpec(name=name, uses=data["uses"], inputs=inputs, params=dict(data.get("with") or {}), after=after,
                    index=index)
