"""A published table's classes counted in a population table (the population generalized as
the table's hierarchy labels say): shared by the population privacy models (delta-presence,
k-map) and the journalist and marketer risks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, InputError, StepContext, TypedTable, generalization, value_keys


def population_counts(anonymized: TypedTable, population: TypedTable, plugin: str, ctx: StepContext,
                      quasi: list[str] | None = None) -> pa.Table:
    """``(_k0.., n, pn)`` per published class (records sharing the published values of
    ``quasi``, by default the typing's quasi-identifiers; a null ``_class`` is suppressed and
    left out), counted in DuckDB: ``n`` the table's records, ``pn`` the population's records
    generalized the same way (see :mod:`anonflow_std.privacy.population_models`; 0 for a class the
    population lacks).
    Shared with the journalist and marketer risks (``reidentification-risk``)."""
    quasi = list(anonymized.typing.quasi) if quasi is None else list(quasi)
    if not quasi:
        raise InputError(f"{plugin} needs quasi-identifiers in the typing of its input")
    sample_cols, pop_cols = {}, {}
    keep = None
    if CLASS in anonymized.columns:
        keep = anonymized.column(CLASS)
    for i, q in enumerate(quasi):
        if q not in population.columns:
            raise InputError(f"{plugin}: the population table has no column {q!r} (a quasi-identifier)")
        published = value_keys(anonymized.column(q))
        pop = value_keys(population.column(q))
        gen = generalization(anonymized, q)
        if gen is not None and gen.get("kind") != "hierarchy":
            raise InputError(f"{plugin}: {q!r} is published as {gen.get('kind')} labels (local recoding); the "
                             "population can be matched only to values or hierarchy labels")
        if gen is not None:
            h = anonymized.hierarchies.get(q) if anonymized.hierarchies else None
            if h is None:
                raise InputError(f"{plugin}: {q!r} holds hierarchy labels but the table has no hierarchy of it")
            labels = pa.array(sorted(set(x for x in published.to_pylist() if x is not None)), pa.string())
            level = next((L for L in range(h.height + 1)
                          if bool(np.all(np.isin(labels.to_pylist(), h.level(L).to_pylist())))), None)
            if level is None:
                raise InputError(f"{plugin}: the published labels of {q!r} are not one level of its hierarchy")
            codes = h.codes(pop)
            if (codes < 0).any():
                bad = pop[int(np.flatnonzero(codes < 0)[0])].as_py()
                raise InputError(f"{plugin}: the population's value {bad!r} of {q!r} is not in its hierarchy")
            pop = h.generalize(pop, level)
        sample_cols[f"_k{i}"] = published
        pop_cols[f"_k{i}"] = pop
    if keep is not None:
        sample_cols["_c"] = keep
    sample = pa.table(sample_cols)
    pop_t = pa.table(pop_cols)
    keys = [f"_k{i}" for i in range(len(quasi))]
    k = ", ".join(keys)
    on = " AND ".join(f"s.{c} IS NOT DISTINCT FROM p.{c}" for c in keys)
    where = "WHERE _c IS NOT NULL" if keep is not None else ""
    return ctx.sql(f"WITH s AS (SELECT {k}, count(*)::BIGINT AS n FROM sample {where} GROUP BY ALL), "
                   f"p AS (SELECT {k}, count(*)::BIGINT AS pn FROM pop GROUP BY ALL) "
                   f"SELECT s.*, coalesce(p.pn, 0)::BIGINT AS pn FROM s LEFT JOIN p ON {on} ORDER BY ALL",
                   sample=sample, pop=pop_t)
