"""Helpers for testing plugins, installed or not.

Unit tests build typed tables and step contexts without a workflow::

    from anonflow.testing import make_context, typed_table

    t = typed_table({"age": [30, 31]}, quasi={"age": "continuous"})
    values = MyMetric().compute(t, t, {}, make_context())

:func:`check_claims` runs an algorithm as the engine does and checks its claims with the
registered privacy metrics. :func:`registry` and :func:`use_plugins` give a registry of the
installed plugins plus the modules under test (a module its entry point has loaded already is
not registered twice), and :func:`run_workflow` runs a workflow file in a temporary store::

    import anonflow_acme
    from anonflow import testing

    def test_workflow(tmp_path):
        with testing.use_plugins(anonflow_acme):
            result = testing.run_workflow("workflow.yaml", tmp_path)
        assert result.metrics["scores.k-anonymity"] >= 5
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import registry as _registry
from .api import CLASS, StepContext, suppression_limit
from .params import validate_params
from .registry import Registry, get_registry, plugin_manager
from .schema import ROW, Attribute, Typing
from .session import Session
from .store import Store
from .table import TypedTable

if TYPE_CHECKING:
    from .runner import RunResult


def typed_table(columns: Mapping[str, Any], *, quasi: Mapping[str, str] | None = None,
                sensitive: Mapping[str, str] | None = None, label: Mapping[str, str] | None = None,
                claims: dict | None = None, extra: Mapping[str, Any] | None = None) -> TypedTable:
    """A typed table from plain columns; ``quasi``/``sensitive``/``label`` map column -> type,
    ``extra`` adds untyped columns such as ``_class``."""
    n = len(next(iter(columns.values())))
    data = {ROW: pa.array(np.arange(n), pa.int64()), **{k: pa.array(v) for k, v in columns.items()}}
    for k, v in (extra or {}).items():
        data[k] = pa.array(v)
    roles = {}
    for role, spec in (("quasi", quasi), ("sensitive", sensitive), ("label", label)):
        for name, typ in (spec or {}).items():
            roles[name] = (role, typ)
    attrs = tuple(Attribute(c, *roles.get(c, ("insensitive", None))) for c in columns)
    return TypedTable(pa.table(data), Typing(attrs), claims or {})


def make_context(step: str = "test", seed: int = 0, store: Store | None = None,
                 output_dir: Path | None = None) -> StepContext:
    """A step context whose ``ctx.sql`` and table helpers run on ``store`` or, at their first use,
    on an in-memory store of its own (opening one takes DuckDB tens of milliseconds, and most
    unit tests of a plugin never query)."""
    opened: list[Store] = [store] if store is not None else []

    def on_store() -> Store:
        if not opened:
            opened.append(Store(":memory:"))
        return opened[0]

    out = output_dir or Path.cwd()
    return StepContext(step=step, seed=seed, rng=np.random.default_rng(seed), workflow_dir=out, output_dir=out,
                       sql=lambda query, params=None, **tables: on_store().sql(query, params, **tables),
                       derive=lambda *args, **kwargs: on_store().derive_table(*args, **kwargs),
                       discard=lambda table: on_store().discard(table),
                       relation=lambda *args, **kwargs: on_store().relation(*args, **kwargs),
                       copy_to=lambda *args, **kwargs: on_store().copy_to(*args, **kwargs))


# -- plugins under test ----------------------------------------------------------------------

def registry(*modules: Any, entry_points: bool = True) -> "Registry":
    """A plugin registry holding the installed plugins (the ``anonflow`` entry points, as
    ``anonflow plugins`` lists them) plus ``modules``: plugin modules, or any objects with
    ``@hookimpl`` functions, under test.

    Works whether or not the package under test is installed: a module the entry points have
    already loaded (the same module object) is not registered a second time, so an installed
    package, an editable install and a plain source checkout all give the same registry.
    ``entry_points=False`` leaves out every installed plugin (then only ``modules`` count)."""
    pm, dists = plugin_manager(load_entrypoints=entry_points)
    for module in modules:
        if pm.is_registered(module):
            continue  # loaded from its entry point already
        name = getattr(module, "__name__", None) or type(module).__name__
        if pm.get_plugin(name) is not None:  # another object under the same name: keep both apart
            name = f"{name}#{id(module)}"
        pm.register(module, name=name)
    pm.check_pending()
    return Registry(pm, dists)


@contextmanager
def use_plugins(*modules: Any, entry_points: bool = True) -> Iterator["Registry"]:
    """Make :func:`registry` ``(*modules)`` the process's registry (what the CLI, the runner
    and ``anonflow.cli.main`` under click's ``CliRunner`` use) for the ``with`` block, and put
    the previous one back afterwards::

        with testing.use_plugins(anonflow_acme) as reg:
            assert reg.has("metric", "acme.class-size")
            result = testing.run_workflow(HERE / "workflow.yaml", tmp_path)
    """
    previous = _registry._REGISTRY
    reg = registry(*modules, entry_points=entry_points)
    _registry.set_registry(reg)
    try:
        yield reg
    finally:
        _registry.set_registry(previous)


def run_workflow(workflow: str | os.PathLike[str], tmp_path: str | os.PathLike[str], *,
                 overrides: Iterable[str] = (), seed: int | None = None, modules: Iterable[Any] = (),
                 output_dir: str | os.PathLike[str] | None = None, use_cache: bool = False) -> "RunResult":
    """Run a workflow as ``anonflow run`` does, with its store in ``tmp_path``, and return the
    :class:`anonflow.runner.RunResult` (``status``, ``metrics``, ``outputs``, ``steps``).

    ``workflow`` is a path (a :class:`~pathlib.Path`, or a string without a newline) or the
    text of a workflow file (a string with newlines), which is written to
    ``tmp_path/workflow.yaml`` -- its relative source paths then name files in ``tmp_path``.
    Published files go to ``output_dir``, by default ``tmp_path/out`` (never beside a shipped
    workflow file). ``overrides`` are ``--set`` values (``"grouped.k=10"``), ``seed`` is
    ``--seed``. Plugins: the process's registry (see :func:`use_plugins`), plus ``modules``
    when given. Invalid workflows and failed runs raise as the CLI's exit codes 2 and 1 do:
    :class:`anonflow.api.InputError` / :class:`anonflow.errors.WorkflowError`, and
    :class:`anonflow.api.RunError`."""
    tmp = Path(tmp_path)
    tmp.mkdir(parents=True, exist_ok=True)
    if isinstance(workflow, str) and "\n" in workflow:
        path = tmp / "workflow.yaml"
        path.write_text(workflow, encoding="utf-8")
    else:
        path = Path(workflow)
    modules = tuple(modules)
    session = Session(tmp / "anonflow.duckdb", registry(*modules) if modules else get_registry())
    spec = session.load(path, overrides, seed)
    return session.run(spec, use_cache=use_cache,
                       output_dir=Path(output_dir) if output_dir is not None else tmp / "out")


def check_claims(algorithm: Any, table: TypedTable, params: Mapping[str, Any] | None = None, *,
                 ctx: StepContext | None = None, registry: "Registry | None" = None) -> TypedTable:
    """Run ``algorithm`` on ``table`` as the engine does and check what it promises; return
    its published output (records with a ``_class``, suppressed ones split off).

    The parameters are validated against the algorithm's declaration (defaults filled in),
    ``check(params, table=table)`` is called, then ``run``. The output must hold exactly the
    input's ``_row`` ids and a ``_class`` column; records with a null ``_class`` must be
    allowed (``suppresses``) and within the cap; and every claim -- ``algorithm.claims(params)``
    and those the output carries -- must be a privacy metric of the registry (default: the
    process's) that holds on the published records. Any failure raises ``AssertionError``
    naming the claim and the metric's values. ``ctx`` defaults to :func:`make_context`."""
    reg = registry or get_registry()
    ctx = ctx or make_context()
    params = validate_params(algorithm.params, dict(params or {}))
    algorithm.check(params, table=table)
    out = algorithm.run(table, params, ctx)
    name = getattr(algorithm, "name", type(algorithm).__name__)
    assert isinstance(out, TypedTable), f"{name}: run returned {type(out).__name__}, expected a TypedTable"
    assert ROW in out.columns and out.num_rows == table.num_rows and \
        sorted(out.rows().tolist()) == sorted(table.rows().tolist()), \
        f"{name}: the output does not hold exactly the input's records (_row ids)"
    assert CLASS in out.columns, f"{name}: the output has no {CLASS} column"
    out = out.replace(claims={**out.claims, **algorithm.claims(params)})
    classes = out.column(CLASS)
    nulls = classes.null_count
    if nulls:
        limit = suppression_limit(algorithm.suppression_cap(params), table.num_rows)
        assert nulls <= limit, (f"{name}: {nulls} of {table.num_rows} records suppressed (null {CLASS}); "
                                f"{'its cap allows ' + str(limit) if algorithm.suppresses else 'it does not declare suppresses'}")
        out = out.replace(data=out.data.filter(pc.is_valid(out.data.column(CLASS))))
    for model, given in out.claims.items():
        assert reg.has("metric", model) and reg.get("metric", model).obj.category == "privacy", \
            f"{name} claims {model!r}, which no installed privacy metric checks (the engine would drop the claim)"
        metric = reg.get("metric", model).obj
        result = metric.compute(None, out, validate_params(metric.params, dict(given)), ctx)
        holds = result.get(f"{model}.holds")
        assert holds is not None, f"{name} claims {model} {given}, but the check gives no verdict: {result}"
        assert holds, f"{name} claims {model} {given}, but its output does not satisfy it: {result}"
    return out
