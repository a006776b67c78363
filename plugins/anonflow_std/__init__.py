"""anonflow's first-party plugins.

Registered through the ``anonflow`` entry-point group exactly like a third party's plugin
(see ``pyproject.toml``); the engine never imports this package. The plugins are arranged in
subpackages by family (``microaggregation``, ``clustering``, ``generalization``, ``perturbation``, ``privacy``,
``risk``, ``utility``, ``publishing``), which import each other only through ``common``: the
helpers and algorithm kernels several families share. Every module under this package that defines ``PLUGINS`` (a list of plugin
objects) is registered: :func:`modules` finds them, in module-name order, so a new module
registers without editing this file; the hooks below hand each plugin to the registry under
its kind.
"""

from __future__ import annotations

import importlib
import pkgutil

from anonflow.api import Algorithm, HierarchyBuilder, Metric, Publisher, hookimpl

__version__ = "0.1.0"


def modules() -> tuple[str, ...]:
    """The full names of the modules under this package that define ``PLUGINS``, sorted."""
    names = sorted(m.name for m in pkgutil.walk_packages(__path__, prefix=f"{__name__}.") if not m.ispkg)
    return tuple(n for n in names if hasattr(importlib.import_module(n), "PLUGINS"))


def _plugins(kind: type) -> list:
    found = []
    for module in modules():
        found += [p for p in importlib.import_module(module).PLUGINS if isinstance(p, kind)]
    return found


@hookimpl
def anonflow_register_algorithms(register, registry):
    # an algorithm that uses other plugins (the lattice's privacy models) is registered bound to
    # the registry it is registered in, and looks them up there
    for plugin in _plugins(Algorithm):
        register(plugin.bound(registry) if hasattr(plugin, "bound") else plugin)


@hookimpl
def anonflow_register_metrics(register):
    for plugin in _plugins(Metric):
        register(plugin)


@hookimpl
def anonflow_register_publishers(register):
    for plugin in _plugins(Publisher):
        register(plugin)


@hookimpl
def anonflow_register_hierarchy_builders(register):
    for plugin in _plugins(HierarchyBuilder):
        register(plugin)
