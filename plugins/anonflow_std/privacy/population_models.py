"""Privacy models measured against a population: delta-presence (Nergiz, Atzori and Clifton
2007; ARX ``DPresence``) and k-map (Sweeney; ARX ``KMap``).

The published table is a *sample* of a public *population* table (another step of the
workflow, named by the parameter ``population``: a table with the same quasi-identifier
columns, holding every sample record and more). A published class is the records sharing
the published QI values; its population count is the population records whose QI values
generalize to the class's published values: a QI published as it is is matched as it is
(as the text a hierarchy lists a value by), a QI published as hierarchy labels (a
``lattice`` output) is mapped through its hierarchy to the lowest level holding every
published label. QIs published as intervals or sets (local recoding) are refused.

* ``delta-presence`` -- every class has delta_min <= n / N <= delta_max (n: its sample
  records, N: its population records), the probability that a population member of the
  class is in the sample. Headline: the largest delta; ``.min`` the smallest.
* ``k-map`` -- every class has at least k population records (ARX: ``pcount >= k``).
  Headline: the smallest population count. Without a population, ARX's estimator-based
  variant: ``estimator: poisson`` or ``zero-truncated-poisson`` with ``sampling_fraction``
  (sample size / population size) and ``significance`` derive k' from the Poisson
  distribution with lambda = sampling_fraction * k (ARX ``KMap.calculateKPoisson`` /
  ``calculateKZeroPoisson``, k' = min(k, derived)), and the check is k'-anonymity of the
  published table (ARX also caps k' at the number of records; this check does not).

The lattice: when the model names a population table, the search codes the population's
quasi-identifiers through the same hierarchies once and gives each node's
:class:`~anonflow.api.Partition` the population count of each class
(:attr:`~anonflow.api.Partition.population`); ``partition_holds`` compares it with the
class sizes. The population's values must all be in the hierarchies, and the table must be a
sample of the population (checked once, at the bottom node). Monotonicity:

* k-map with a population is monotone, with and without suppression: a coarser class's
  population count is the sum of the finer classes' inside it, so a class containing a class
  with ``N >= k`` has ``N >= k`` too (ARX: monotone). With an estimator it is k'-anonymity.
* delta-presence is *not* monotone: generalizing merges a class with population records
  that have no sample record (``n = 0``), which lowers n / N below a ``delta_min`` the finer
  class met (1 of 2 population records is 0.5; merged with 10 population-only records it is
  1 / 12). ARX declares it monotone with generalization; this check does not, so the lattice
  checks every node. With ``delta_min = 0`` only the upper bound remains, and a merged
  class's share is at most the largest of its parts', but the flag is one per model.

The pure functions :func:`presence` and :func:`population_map` compute the models from class
keys and counts.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, InputError, Metric, Param, Partition, StepContext, TypedTable, sql_ident
from anonflow_std.common.population import population_counts
from anonflow_std.common.wildcard import refuse_null_qis

__version__ = "0.1.0"

#: slack on floating-point comparisons
EPS = 1e-9

POPULATION = Param("population", "step", default=None, nullable=True,
                   help="the source or step holding the public population table (same quasi-identifier columns)")


# -- the pure core ---------------------------------------------------------------------------


def presence(sample: Mapping[tuple, int], population: Mapping[tuple, int]) -> dict[tuple, tuple[int, int, float]]:
    """Per published class key: ``(n, N, n / N)``, its sample and population records. A
    sample class the population lacks, or holds fewer of, is an InputError (the sample must be
    part of the population)."""
    out = {}
    for key, n in sample.items():
        N = int(population.get(key, 0))
        if N < n:
            raise InputError(f"the population holds {N} record(s) of the published class {key!r}, fewer than the "
                             f"sample's {n}: the published table must be a sample of the population")
        out[key] = (int(n), N, n / N)
    return out


def delta_presence_holds(sample: Mapping[tuple, int], population: Mapping[tuple, int], delta_min: float,
                         delta_max: float) -> dict[tuple, bool]:
    """Whether each published class has delta_min <= n / N <= delta_max."""
    return {k: delta_min - EPS <= d <= delta_max + EPS for k, (_, _, d) in presence(sample, population).items()}


def population_map(sample: Mapping[tuple, int], population: Mapping[tuple, int], k: int) -> dict[tuple, bool]:
    """k-map: whether each published class has at least k population records."""
    return {key: N >= k for key, (_, N, _) in presence(sample, population).items()}


def _poisson_pmf(i: int, lam: float) -> float:
    if lam <= 0:
        return 1.0 if i == 0 else 0.0
    return math.exp(-lam + i * math.log(lam) - math.lgamma(i + 1))


def derived_k(k: int, sampling_fraction: float, significance: float, estimator: str) -> int:
    """ARX's k' for estimator-based k-map (``KMap.calculateKPoisson`` and
    ``calculateKZeroPoisson``, then ``min(k, k')``; lambda = sampling_fraction * k)."""
    lam = sampling_fraction * k
    threshold = 1.0 - significance
    if estimator == "poisson":
        counter, value, cdf = 0, 0.0, 0.0
        while value < threshold:
            cdf += _poisson_pmf(counter, lam)
            value = cdf
            counter += 1
            if counter >= k:
                break
        out = counter + 1
    elif estimator == "zero-truncated-poisson":
        v2 = 1.0 - _poisson_pmf(0, lam)
        counter, value = 1, 0.0
        while value < threshold:
            value += _poisson_pmf(counter, lam) / v2 if v2 > 0 else 1.0
            counter += 1
            if counter >= k:
                break
        out = counter
    else:
        raise InputError(f"k-map: unknown estimator {estimator!r}")
    return int(min(k, out))


# -- from tables -------------------------------------------------------------------------------


def _population(params: Mapping[str, Any], ctx: StepContext, plugin: str, hint: str) -> TypedTable:
    name = params.get("population")
    if not name:
        raise InputError(f"{plugin} needs a population table: name the source or step holding it, e.g. "
                         f"population: census_typed{hint}")
    return ctx.table(name)


def _subset_check(counts: pa.Table, plugin: str) -> None:
    n = counts.column("n").to_numpy()
    pn = counts.column("pn").to_numpy()
    bad = np.flatnonzero(pn < n)
    if bad.size:
        row = {c: counts.column(c)[int(bad[0])].as_py() for c in counts.column_names}
        raise InputError(f"{plugin}: the population holds {row['pn']} record(s) of a published class that has "
                         f"{row['n']} in the sample ({row}): the published table must be a sample of the population")


class DeltaPresence(Metric):
    name = "delta-presence"
    version = __version__
    description = ("delta-presence: in every published class the share of the population's class that is in the "
                   "sample, n / N, lies in [delta_min, delta_max]; needs a population table.")
    category = "privacy"
    requires_original = False
    params = (Param("delta_min", "float", default=0.0, min=0.0, max=1.0, help="smallest n / N allowed"),
              Param("delta_max", "float", default=None, nullable=True, min=0.0, max=1.0,
                    help="largest n / N allowed (default: the claimed delta_max)"),
              POPULATION)
    #: not monotone: a coarser class takes in population records without sample records
    #: (module docstring), so the lattice checks every node
    monotone = False
    monotone_with_suppression = False
    weighted_partitions = True

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        refuse_null_qis(ctx, anonymized, self.name, "matching published classes with population classes is not implemented for wildcards; evaluate it on a table without suppressed cells, or use k-anonymity (nulls as wildcards)")
        claim = anonymized.claims.get(self.name, {})
        dmax = params.get("delta_max") if params.get("delta_max") is not None else claim.get("delta_max")
        dmin = params.get("delta_min") or 0.0
        pop = _population(params, ctx, self.name, "")
        counts = population_counts(anonymized, pop, self.name, ctx)
        _subset_check(counts, self.name)
        row = ctx.sql("SELECT count(*) AS classes, max(n / pn) AS hi, min(n / pn) AS lo, "
                      "count(*) FILTER (WHERE n / pn < ? - ? OR n / pn > ? + ?) AS violating, "
                      "coalesce(sum(n), 0) AS n, coalesce(sum(pn), 0) AS pn FROM counts",
                      [float(dmin), EPS, float(dmax if dmax is not None else 1.0), EPS], counts=counts).to_pylist()[0]
        n = self.name
        out = {n: float(row["hi"] or 0.0), f"{n}.min": float(row["lo"] or 0.0),
               f"{n}.classes": float(row["classes"] or 0), f"{n}.sample_records": float(row["n"]),
               f"{n}.population_records_matched": float(row["pn"])}
        if dmax is not None:
            out.update({f"{n}.delta_min": float(dmin), f"{n}.delta_max": float(dmax),
                        f"{n}.violating_classes": float(row["violating"] or 0),
                        f"{n}.holds": float((row["violating"] or 0) == 0)})
        return out


    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        dmax = params.get("delta_max")
        if dmax is None:
            raise InputError("delta-presence needs delta_max, e.g. model_params: {delta_min: 0.1, delta_max: 0.6, "
                             "population: census}")
        pop = partition.population
        if pop is None:
            raise InputError("delta-presence needs a population table: name the source or step holding it, e.g. "
                             "model_params: {delta_max: 0.6, population: census}")
        n = np.asarray(partition.sizes, dtype=np.float64)
        share = n / np.maximum(np.asarray(pop, dtype=np.float64), 1.0)
        return (share >= float(params.get("delta_min") or 0.0) - EPS) & (share <= float(dmax) + EPS)


class KMap(Metric):
    name = "k-map"
    version = __version__
    description = ("k-map: every published class matches at least k records of the population table (or, with an "
                   "estimator, ARX's Poisson-derived k'-anonymity of the sample).")
    category = "privacy"
    requires_original = False
    params = (Param("k", "int", default=None, nullable=True, min=1, help="required population records per class"),
              POPULATION,
              Param("estimator", "str", default=None, nullable=True, choices=("poisson", "zero-truncated-poisson"),
                    help="without a population: estimate the population's class sizes (ARX's KMap estimators)"),
              Param("sampling_fraction", "float", default=None, nullable=True, above=0.0, max=1.0,
                    help="with an estimator: sample size / population size"),
              Param("significance", "float", default=0.01, min=0.0, max=1.0,
                    help="with an estimator: the significance level (ARX's)"))
    #: a merged (or containing) class matches at least as many population records
    monotone = True
    monotone_with_suppression = True
    weighted_partitions = True

    def _derived(self, params: Mapping[str, Any], k: int) -> int:
        if params.get("sampling_fraction") is None:
            raise InputError("k-map with an estimator needs sampling_fraction (sample size / population size)")
        return derived_k(int(k), float(params["sampling_fraction"]), float(params.get("significance") or 0.0),
                         params["estimator"])

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        refuse_null_qis(ctx, anonymized, self.name, "matching published classes with population classes is not implemented for wildcards; evaluate it on a table without suppressed cells, or use k-anonymity (nulls as wildcards)")
        k = params.get("k") if params.get("k") is not None else anonymized.claims.get(self.name, {}).get("k")
        n = self.name
        if params.get("estimator") and not params.get("population"):
            if k is None:
                raise InputError("k-map needs k")
            kk = self._derived(params, k)
            quasi = list(anonymized.typing.quasi)
            if not quasi:
                raise InputError("k-map needs quasi-identifiers in the typing of its input")
            group = ", ".join(sql_ident(q) for q in quasi)
            where = f"WHERE {sql_ident(CLASS)} IS NOT NULL" if CLASS in anonymized.columns else ""
            row = ctx.sql(f"WITH c AS (SELECT count(*) AS n FROM t {where} GROUP BY {group}) "
                          "SELECT min(n) AS smallest, count(*) AS classes, count(*) FILTER (WHERE n < ?) AS violating "
                          "FROM c", [kk], t=anonymized).to_pylist()[0]
            return {n: float(row["smallest"] or 0), f"{n}.classes": float(row["classes"] or 0), f"{n}.k": float(k),
                    f"{n}.derived_k": float(kk), f"{n}.violating_classes": float(row["violating"] or 0),
                    f"{n}.holds": float((row["violating"] or 0) == 0)}
        pop = _population(params, ctx, self.name, ", or use estimator: poisson with sampling_fraction")
        counts = population_counts(anonymized, pop, self.name, ctx)
        _subset_check(counts, self.name)
        row = ctx.sql("SELECT count(*) AS classes, min(pn) AS smallest, count(*) FILTER (WHERE pn < ?) AS violating "
                      "FROM counts", [int(k or 0)], counts=counts).to_pylist()[0]
        out = {n: float(row["smallest"] or 0), f"{n}.classes": float(row["classes"] or 0)}
        if k is not None:
            out.update({f"{n}.k": float(k), f"{n}.violating_classes": float(row["violating"] or 0),
                        f"{n}.holds": float((row["violating"] or 0) == 0)})
        return out

    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        k = params.get("k")
        if k is None:
            raise InputError("k-map needs k, e.g. model_params: {k: 10, population: census}")
        if params.get("population"):
            pop = partition.population
            if pop is None:
                raise InputError("k-map: this search gives no population counts for the classes; run it with the "
                                 "lattice, which reads the population table named by model_params.population")
            return np.asarray(pop) >= int(k)
        if not params.get("estimator"):
            raise InputError("k-map needs a population table (model_params: {k: 10, population: census}) or an "
                             "estimator (estimator: poisson, sampling_fraction: 0.1)")
        return np.asarray(partition.sizes) >= self._derived(params, k)


PLUGINS = [DeltaPresence(), KMap()]
