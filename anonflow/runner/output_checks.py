"""Before a run writes anything: where its publish steps will write, checked as a whole.

Every path a publish step will write must resolve inside the output folder and may be
written (:class:`anonflow.outputs.OutputGuard`: never over the store, a file the workflow
reads or a file this store did not publish), and no two steps write the same file or one
inside the other's folder (:func:`check_outputs`). The guard built here checks each path
again when a publisher writes it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import AnonflowError, InputError
from ..outputs import OutputGuard, inside
from ..registry import Registry
from ..sources import kind_of
from ..steps import step_of
from ..store import Store
from .plan import Plan


def files_read(plan: Plan, registry: Registry) -> list[Path]:
    """Every file the workflow reads: its own file, the sources, and every existing file a
    step's parameters name (hierarchy and grading files), resolved against its folder."""
    spec = plan.spec
    found: list[Path] = [spec.path.resolve()]
    found += [f for s in spec.sources.values() for f in kind_of(s).files(s)]

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
        walk(step_of(node).read_params(node, registry))  # what a publish step writes is not read
    return found


def output_guard(plan: Plan, out_dir: Path, store: Store, registry: Registry) -> "OutputGuard":
    """The guard of a run's output paths: inside ``out_dir``, never over the store or a file
    the workflow reads, never over a file this store did not publish."""
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
        if step_of(node).produces != "files":
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
