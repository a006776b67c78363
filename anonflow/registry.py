"""The plugin manager and the registry of algorithms, metrics, publishers and hierarchy
builders.

Plugins are found through the ``anonflow`` entry-point group; anonflow's own first-party
plugins are registered there too, so they load exactly like a third party's. Set
``ANONFLOW_PLUGINS`` to a comma-separated list of entry-point names to load only those
(an empty value loads none), and ``ANONFLOW_TRACE_PLUGINS=1`` to trace hook calls.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Iterator

import pluggy

from . import hookspecs
from .codehash import code_digest
from .api import Algorithm, HierarchyBuilder, Metric, Plugin, Publisher
from .errors import PluginError, WorkflowError
from .params import Param, suggest
from .sourcekind import Source

GROUP = "anonflow"
KINDS: dict[str, type[Plugin]] = {"algorithm": Algorithm, "metric": Metric, "publisher": Publisher,
                                  "hierarchy": HierarchyBuilder}
_HOOKS = {
    "algorithm": "anonflow_register_algorithms",
    "metric": "anonflow_register_metrics",
    "publisher": "anonflow_register_publishers",
    "hierarchy": "anonflow_register_hierarchy_builders",
}
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class Registered:
    """A registered plugin object and where it came from."""

    kind: str
    name: str
    version: str
    obj: Any
    module: str
    distribution: str
    distribution_version: str

    @property
    def code(self) -> str:
        """The sha256 of the code this plugin runs: every top-level module and package of the
        distribution its entry point belongs to, of the module that registered it and of the
        one that defines its class, and of the distributions those come from, read where
        Python imports them from (see :mod:`anonflow.codehash`)."""
        dists = (self.distribution,) if self.distribution != "(not installed)" else ()
        return code_digest(self.module, type(self.obj).__module__, distributions=dists)

    def describe(self) -> dict[str, str]:
        """What a step record keeps of a plugin it used: kind, name, version, distribution and
        code digest."""
        return {"kind": self.kind, "name": self.name, "version": self.version,
                "distribution": self.distribution, "code": self.code}

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "version": self.version,
            "code": self.code,
            "description": self.obj.description,
            "module": self.module,
            "distribution": self.distribution,
            "distribution_version": self.distribution_version,
            "params": [p.to_json() for p in self.obj.params],
        }


class Registry:
    """All registered plugins, by kind and name."""

    def __init__(self, pm: pluggy.PluginManager,
                 dists: dict[str, tuple[str, str]] | None = None) -> None:
        """Call every registration hook of ``pm``; ``dists`` maps a pluggy plugin name to
        the (distribution, version) it was installed from."""
        self.pm = pm
        self._by_kind: dict[str, dict[str, Registered]] = {k: {} for k in KINDS}
        #: source kinds plugins registered (``anonflow_register_sources``), by name; anonflow's
        #: own are :data:`anonflow.sources.BUILTIN`
        self.sources: dict[str, Source] = {}
        dists = dists or {}
        for kind, hook_name in _HOOKS.items():
            caller = getattr(pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                dist_name, dist_version = dists.get(impl.plugin_name, ("(not installed)", ""))
                # a module registers itself; an object registers from its class's module
                module = getattr(impl.plugin, "__name__", None) or type(impl.plugin).__module__

                def register(obj: Any, _kind=kind, _module=module, _dn=dist_name, _dv=dist_version) -> None:
                    self._add(_kind, obj, _module, _dn, _dv)

                # an implementation that names ``registry`` gets the registry being built (hookspecs)
                given = {"registry": self} if "registry" in impl.argnames else {}
                try:
                    impl.function(register=register, **given)
                except PluginError:
                    raise
                except Exception as exc:
                    raise PluginError(f"plugin {impl.plugin_name!r} ({dist_name}) failed while registering "
                                      f"its {kind}s: {type(exc).__name__}: {exc}") from exc

        for impl in pm.hook.anonflow_register_sources.get_hookimpls():
            dist_name = dists.get(impl.plugin_name, ("(not installed)", ""))[0]
            try:
                impl.function(register=lambda obj, _m=impl.plugin_name: self._add_source(obj, _m))
            except PluginError:
                raise
            except Exception as exc:
                raise PluginError(f"plugin {impl.plugin_name!r} ({dist_name}) failed while registering "
                                  f"its sources: {type(exc).__name__}: {exc}") from exc

    def _add_source(self, obj: Any, plugin: str) -> None:
        if isinstance(obj, type):
            obj = obj()
        if not isinstance(obj, Source):
            raise PluginError(f"plugin {plugin!r} registered {obj!r} as a source, but it is not an instance of "
                              "anonflow.api.Source")
        if not isinstance(obj.name, str) or not _NAME.match(obj.name):
            raise PluginError(f"plugin {plugin!r}: source name {obj.name!r} must be lower-case letters, digits, "
                              "'.', '_' or '-'")
        if obj.name in self.sources:
            raise PluginError(f"source name {obj.name!r} is registered twice")
        self.sources[obj.name] = obj

    def _add(self, kind: str, obj: Any, module: str, dist: str, dist_version: str) -> None:
        base = KINDS[kind]
        if isinstance(obj, type):
            obj = obj()
        if not isinstance(obj, base):
            raise PluginError(f"plugin module {module} registered {obj!r} as a {kind}, "
                              f"but it is not an instance of anonflow.api.{base.__name__}")
        name = getattr(obj, "name", "")
        if not isinstance(name, str) or not _NAME.match(name):
            raise PluginError(f"plugin module {module}: {kind} name {name!r} must be lower-case "
                              "letters, digits, '.', '_' or '-'")
        for p in obj.params:
            if not isinstance(p, Param):
                raise PluginError(f"{kind} {name!r} ({module}): params must be anonflow.api.Param objects")
        existing = self._by_kind[kind].get(name)
        if existing is not None:
            raise PluginError(f"{kind} name {name!r} is registered twice: by {existing.module} "
                              f"({existing.distribution}) and by {module} ({dist})")
        version = obj.version or dist_version or "0"
        self._by_kind[kind][name] = Registered(kind, name, version, obj, module, dist, dist_version)

    def names(self, kind: str) -> list[str]:
        return sorted(self._by_kind[kind])

    def get(self, kind: str, name: str, *, where: str | None = None) -> Registered:
        try:
            return self._by_kind[kind][name]
        except KeyError:
            known = self.names(kind)
            hint = suggest(name, known) or (f"; known {kind}s: {', '.join(known)}" if known else f"; no {kind}s are installed")
            raise WorkflowError(f"unknown {kind} {name!r}{hint}", where=where) from None

    def has(self, kind: str, name: str) -> bool:
        return name in self._by_kind[kind]

    def __iter__(self) -> Iterator[Registered]:
        for kind in KINDS:
            for name in self.names(kind):
                yield self._by_kind[kind][name]


def plugin_manager(load_entrypoints: bool = True) -> tuple[pluggy.PluginManager, dict[str, tuple[str, str]]]:
    """A plugin manager with the hook specifications and the installed plugins loaded,
    and the distribution (name, version) each entry point came from."""
    pm = pluggy.PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    dists: dict[str, tuple[str, str]] = {}
    if load_entrypoints:
        wanted = os.environ.get("ANONFLOW_PLUGINS")
        names = None if wanted is None else {n.strip() for n in wanted.split(",") if n.strip()}
        for ep in sorted(metadata.entry_points(group=GROUP), key=lambda e: e.name):
            if names is not None and ep.name not in names:
                continue
            if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken third-party plugin must not look like our bug
                raise PluginError(f"cannot load plugin entry point {ep.name!r} ({ep.value}): "
                                  f"{type(exc).__name__}: {exc}") from exc
            pm.register(plugin, name=ep.name)
            if ep.dist is not None:
                dists[ep.name] = (ep.dist.metadata["Name"], ep.dist.version)
        pm.check_pending()
    if os.environ.get("ANONFLOW_TRACE_PLUGINS"):
        pm.trace.root.setwriter(lambda msg: sys.stderr.write(msg))
        pm.enable_tracing()
    return pm, dists


_REGISTRY: Registry | None = None


def get_registry(refresh: bool = False) -> Registry:
    """The process-wide registry, built on first use."""
    global _REGISTRY
    if _REGISTRY is None or refresh:
        _REGISTRY = Registry(*plugin_manager())
    return _REGISTRY


def set_registry(registry: Registry | None) -> None:
    """Replace the process-wide registry (tests register mock plugins this way)."""
    global _REGISTRY
    _REGISTRY = registry
