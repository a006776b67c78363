"""anonflow's first-party plugins.

Registered through the ``anonflow`` entry-point group exactly like a third party's plugin
(see ``pyproject.toml``); the engine never imports this package. Each module listed in
``MODULES`` exposes ``PLUGINS``, a list of plugin objects; the hooks below hand each one to
the registry under its kind.
"""

from __future__ import annotations

import importlib

from anonflow.api import Algorithm, HierarchyBuilder, Metric, Publisher, hookimpl

__version__ = "0.1.0"

MODULES = ("algorithms", "metrics", "publishers", "hierarchies", "gca", "alphak", "lossyjoin", "lattice", "utility", "lclustering", "release", "maasae", "metrics_groups", "linkage")


def _plugins(kind: type) -> list:
    found = []
    for module in MODULES:
        found += [p for p in importlib.import_module(f"{__name__}.{module}").PLUGINS if isinstance(p, kind)]
    return found


@hookimpl
def anonflow_register_algorithms(register):
    for plugin in _plugins(Algorithm):
        register(plugin)


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
