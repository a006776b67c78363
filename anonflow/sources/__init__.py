"""Sources: where a workflow's records come from, one module per kind.

Each module of this package (but those named ``_*``) defines ``SOURCE``, a
:class:`~anonflow.sourcekind.Source` object: how the kind is declared in a workflow file,
described, read into the store, hashed, and what a re-run needs of it. They are found here by
listing the package, so adding a kind is adding a module; a third party registers more through
the ``anonflow_register_sources`` hook (:class:`anonflow.registry.Registry`). Every caller
looks a kind up by name (:func:`get`) or through :attr:`SourceSpec.kind`; none branches on a
format.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any, Mapping

from ..errors import PluginError, WorkflowError
from ..params import suggest
from ..registry import Registry, get_registry
from ..sourcekind import Source, SourceSpec


def _builtin() -> dict[str, Source]:
    found: dict[str, Source] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "SOURCE", None)
        if isinstance(kind, Source):
            if kind.name in found:
                raise PluginError(f"source kind {kind.name!r} is defined twice in anonflow.sources")
            found[kind.name] = kind
    return found


#: the source kinds of anonflow itself, by name
BUILTIN: dict[str, Source] = _builtin()


def kinds(registry: Registry | None = None) -> dict[str, Source]:
    """Every source kind: anonflow's and those plugins registered (a plugin may not take a
    built-in kind's name)."""
    extra = (registry if registry is not None else get_registry()).sources
    clash = sorted(set(extra) & set(BUILTIN))
    if clash:
        raise PluginError(f"source kind {clash[0]!r} is registered by a plugin, but it is one of anonflow's own")
    return {**BUILTIN, **extra}


def get(name: str, registry: Registry | None = None) -> Source:
    """The source kind ``name`` (a built-in one is found without loading plugins)."""
    if name in BUILTIN:
        return BUILTIN[name]
    known = kinds(registry)
    if name not in known:
        raise WorkflowError(f"unknown source format {name!r}{suggest(name, known)}; known formats: "
                            + ", ".join(sorted(known)))
    return known[name]


def is_kind(name: Any) -> bool:
    """Whether ``name`` names a source kind (a plugin's too)."""
    return isinstance(name, str) and (name in BUILTIN or name in kinds())


def recorded_in_memory(recorded: Mapping[str, Any]) -> bool:
    """Whether a recorded source (a release manifest's ``sources`` entry) was an in-memory
    table (given in Python: no file to read it again from)."""
    kind = BUILTIN.get(recorded.get("format"))  # type: ignore[arg-type]
    return kind is not None and kind.in_memory


def kind_of(src: SourceSpec) -> Source:
    """The kind of a parsed source (its own, or looked up by its format)."""
    return src.kind if src.kind is not None else get(src.format)


def infer(data: Mapping[str, Any]) -> Source:
    """The kind a declaration names: the kind that claims it (``postgres:``, an in-memory
    table), its ``format:``, a key that implies one (``table:``), or its file's extension."""
    known = BUILTIN if data.get("format") in (None, *BUILTIN) else kinds()
    for kind in known.values():
        if kind.claims(data):
            return kind
    if data.get("format") is not None:
        return get(str(data["format"]))
    for kind in known.values():
        if any(data.get(key) is not None for key in kind.implied_by):
            return kind
    file = data.get("path") if data.get("path") is not None else data.get("db")
    if file is None:
        raise WorkflowError("a source needs 'path' (a CSV or Parquet file) or 'table' (a DuckDB table)")
    suffix = Path(str(file)).suffix.lower()
    for kind in known.values():
        if suffix in kind.extensions:
            return kind
    raise WorkflowError(f"cannot tell the format of {file!r} from its extension; add format: csv|parquet|duckdb")


def parse(name: str, data: Any, base: Path, tables: Mapping[str, Any]) -> SourceSpec:
    """One source's declaration (a path, or a mapping) as a :class:`SourceSpec`; a
    :class:`WorkflowError` without location for what is wrong (the caller names the file)."""
    if isinstance(data, str):
        data = {"path": data}
    return infer(data).parse(name, data, base, tables)


def describe_source(src: SourceSpec) -> list[tuple[str, str]]:
    """Column names and DuckDB types of a source, without loading it all (for planning)."""
    return kind_of(src).columns(src)


def load_source(store: Any, src: SourceSpec, *, run_id: str) -> Any:
    """Read a source into the store (DuckDB reads it; no record passes through Python) and
    return its artifact, its records numbered ``_row`` in the order read."""
    return kind_of(src).load(store, src, run_id=run_id)


__all__ = ["BUILTIN", "Source", "SourceSpec", "describe_source", "get", "infer", "is_kind", "kind_of", "kinds",
           "load_source", "parse", "recorded_in_memory"]
