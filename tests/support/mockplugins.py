"""Mock plugins for the tests: register plugin objects beside the installed ones (``use``), a
provider of mock algorithms, metrics, publishers and hierarchy builders (``Provider``), and the
Census workflow with its algorithm replaced by a mock (``census_using``)."""
from __future__ import annotations

from anonflow import registry as plugins
from anonflow.api import hookimpl

from tests.support.helpers import census_workflow


def use(*objs):
    """Make the registry the installed plugins plus ``objs`` (mock plugin objects)."""
    pm, dists = plugins.plugin_manager()
    for i, obj in enumerate(objs):
        pm.register(obj, name=f"mock{i}")
    registry = plugins.Registry(pm, dists)
    plugins.set_registry(registry)
    return registry


class Provider:
    def __init__(self, algorithms=(), metrics=(), publishers=(), builders=()):
        self.a, self.m, self.p, self.b = algorithms, metrics, publishers, builders

    @hookimpl
    def anonflow_register_hierarchy_builders(self, register):
        for b in self.b:
            register(b)

    @hookimpl
    def anonflow_register_algorithms(self, register):
        for a in self.a:
            register(a)

    @hookimpl
    def anonflow_register_metrics(self, register):
        for m in self.m:
            register(m)

    @hookimpl
    def anonflow_register_publishers(self, register):
        for p in self.p:
            register(p)


def census_using(project, algorithm, params: str = "{}"):
    """The Census workflow with its mdav step replaced by ``algorithm`` (registered as a mock)."""
    use(Provider(algorithms=[algorithm]))
    wf = census_workflow(project)
    wf.write_text(wf.read_text().replace("uses: mdav", f"uses: {algorithm.name}").replace("{k: 5}", params))
    return wf
