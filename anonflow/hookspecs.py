"""Hook specifications: the kinds of plugin anonflow knows.

Plugins are discovered through the ``anonflow`` entry-point group (first-party plugins
included). A plugin module implements one or more of these hooks with
``@anonflow.hookimpl``. Each registration hook receives a ``register`` callback owned by
the host: the plugin hands over plugin objects, the host keeps the registry, checks their
declarations, and rejects duplicate names.

All five hooks are registration hooks: :class:`anonflow.registry.Registry` calls each once,
in the order below, when the registry is built (``tests/registry/test_registration.py`` checks that
every hook declared here is called). Hooks of a later lifecycle phase would get a section
of their own.
"""

from __future__ import annotations

from typing import Any, Callable

import pluggy

hookspec = pluggy.HookspecMarker("anonflow")
hookimpl = pluggy.HookimplMarker("anonflow")


# -- registration: called once when the registry is built --------------------------------


@hookspec
def anonflow_register_algorithms(register: Callable[[object], None], registry: Any) -> None:
    """Register anonymization algorithms.

    :param register: call ``register(algorithm)`` once per :class:`anonflow.api.Algorithm`
        instance. An algorithm takes a typed table and returns it with a ``_class`` column
        (the class / group id) and the published QI values; it may declare the privacy
        models it guarantees through :meth:`~anonflow.api.Algorithm.claims`.
    :param registry: the registry being built (an implementation may leave it out): an
        algorithm that uses other plugins (the lattice searches a registered privacy model)
        keeps it and looks them up there once the registry is built, never globally.
    :return: nothing; the result of the hook is ignored.
    """


@hookspec
def anonflow_register_metrics(register: Callable[[object], None]) -> None:
    """Register metrics and privacy checks.

    :param register: call ``register(metric)`` once per :class:`anonflow.api.Metric`
        instance. A metric takes the original and the anonymized typed tables (aligned by
        ``_row``) and returns named numbers; a privacy check (``category = "privacy"``) also
        returns ``"<name>.holds"`` (1.0 or 0.0).
    :return: nothing; the result of the hook is ignored.
    """


@hookspec
def anonflow_register_publishers(register: Callable[[object], None]) -> None:
    """Register publishers.

    :param register: call ``register(publisher)`` once per :class:`anonflow.api.Publisher`
        instance. A publisher writes a typed table out (files and/or DuckDB tables) and
        returns what it wrote as :class:`anonflow.api.Output` records.
    :return: nothing; the result of the hook is ignored.
    """


@hookspec
def anonflow_register_hierarchy_builders(register: Callable[[object], None]) -> None:
    """Register hierarchy builders, used by the built-in ``hierarchy`` step.

    :param register: call ``register(builder)`` once per
        :class:`anonflow.api.HierarchyBuilder` instance. A builder turns a column's distinct
        values and its parameters into a :class:`anonflow.hierarchy.Hierarchy` (one row per
        value, one column per level); the engine then validates it against the data.
    :return: nothing; the result of the hook is ignored.
    """


@hookspec
def anonflow_register_sources(register: Callable[[object], None]) -> None:
    """Register source kinds: where a workflow's records can come from.

    :param register: call ``register(source)`` once per :class:`anonflow.api.Source` instance.
        Its ``name`` is the ``format:`` a workflow file gives to use it (it may not be one of
        anonflow's own: ``csv``, ``parquet``, ``parquet-dataset``, ``duckdb``, ``postgres``,
        ``arrow``). The source parses its declaration, describes its columns for planning,
        reads its records into the store (``store.ingest``), and says its content hash and
        the files a re-run needs (docs/plugins.md).
    :return: nothing; the result of the hook is ignored.
    """
