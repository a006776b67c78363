"""anonflow's first-party plugins.

Registered through the ``anonflow`` entry-point group exactly like a third party's plugin
(see ``pyproject.toml``); the engine never imports this package.
"""

from __future__ import annotations

from anonflow.api import hookimpl

__version__ = "0.1.0"


@hookimpl
def anonflow_register_algorithms(register):
    from .algorithms import Mdav

    register(Mdav())


@hookimpl
def anonflow_register_metrics(register):
    from .metrics import KAnonymity, SseIl

    register(SseIl())
    register(KAnonymity())


@hookimpl
def anonflow_register_publishers(register):
    from .publishers import CsvPublisher, ParquetPublisher

    register(CsvPublisher())
    register(ParquetPublisher())


@hookimpl
def anonflow_register_hierarchy_builders(register):
    from .hierarchies import ArxFile, Intervals, Masking, Taxonomy

    register(ArxFile())
    register(Intervals())
    register(Masking())
    register(Taxonomy())
