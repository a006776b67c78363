"""Applying a recorded workflow's preparation to new data, and writing a result folder whole.

``anonflow apply RELEASE NEW_DATA`` (docs/releases.md, "Applying a release to new data")
publishes a new batch of records the way a release published its table. What that takes is
split by what knows about it:

* the engine (this module) knows workflows: :func:`prepare_batch` runs the steps of a
  recorded workflow that prepare the table an algorithm reads (its source, typing, filter,
  sample and hierarchy steps, with the recorded seed and ``--set`` values) on the new data
  instead of the recorded source, in a throw-away in-memory store, exactly as ``anonflow
  plan`` previews a workflow; so the new batch gets the same roles, dropped identifiers,
  types, missing-value policy and hierarchies (a missing column, a value outside a
  hierarchy: the same one-line errors as a run). :func:`write_folder` writes a result
  folder all or nothing;
* the release publisher (a plugin: it owns the release format) reads the release, finds the
  files the workflow read, calls this module, re-checks the claimed privacy models and
  writes the application's record;
* the algorithm (a plugin) maps the new records onto what it published, through its
  optional ``apply`` method (docs/plugins.md): the lattice applies its node, the
  microaggregation family assigns each record to the nearest published group.

The engine imports no plugin: it reaches algorithms and publishers through the registry.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

from .errors import AnonflowError, InputError
from .filemodes import make_ordinary
from .schema import FRAGMENT
from .steps import STEPS
from .table import TypedTable

#: the step kinds whose work is redone on the new data (Step.preparation and redone_by_apply: a
#: partition step is not: an applied batch is mapped record by record onto the release, with no fragments)
PREPARATION = tuple(kind for kind, s in STEPS.items() if s.preparation and s.redone_by_apply)
#: new data files apply reads, by extension
NEW_FORMATS = {".csv": "csv", ".tsv": "csv", ".txt": "csv", ".parquet": "parquet", ".pq": "parquet"}


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
        if uses == "partition":
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
    from .runner.plan import build_plan
    from . import egress
    from .runner import Runner
    from .spec import load_workflow
    from .store import Store

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
        if s.get("uses") == "partition":
            continue
        ins = [i for i in _inputs(s)]
        # a step fed by a left-out partition step reads what the partition step read
        ins = [next(iter(_inputs(data["steps"][i]))) if i in data["steps"] and isinstance(data["steps"][i], Mapping)
               and data["steps"][i].get("uses") == "partition" else i for i in ins]
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
            wf = load_workflow(path, sets, seed)
            plan = build_plan(wf, registry)
            # a release's workflow is someone else's: what it reaches is the re-run's policy
            run = Runner(store, registry, egress=egress.for_rerun()).run(wf, use_cache=False, plan=plan)
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
