"""A threshold on the estimated population uniqueness (ARX's privacy model ``PopulationUniqueness``).

**What is protected.** A record that is the only one in the *population* with its published
quasi-identifier values can be re-identified by anyone who knows those values of a person.
The published table is a sample of a population of N people; from the sample's class sizes
a statistical model estimates how many people of the population are unique on the
quasi-identifiers. ``max-population-uniqueness`` holds when that estimate, as a fraction of the
population, is at most ``max``:

    estimated population uniques / N  <=  max

**Counting.** The classes are the published records sharing the published QI values
(``by: values``, the default; ``by: class``: sharing ``_class``); suppressed records (a null
``_class``) are left out. DuckDB groups them and hands back the frequency of frequencies (how
many classes have each size); the estimate is computed over it by the functions of
:mod:`anonflow_std.risk.reidentification` (``pitman``, ``zayatz``, ``snb`` and Dankar et al.'s
rule through ``population_uniqueness``), which were checked against ARX's own classes. n is the
published records, N the population: ``population_size``, else ``round(n / sampling_fraction)``,
else the USA's 317,238,626 (ARX's ``Region.USA``); the same parameters and defaults as the
``population-uniqueness`` risk metric.

**What ARX does** (``criteria/PopulationUniqueness.java`` and ``RiskBasedCriterion.java``,
``framework/check/groupify/HashGroupifyDistribution.java``, read at commit aacd487f):

* The check is on the whole distribution of class sizes, not per class
  (``PopulationUniqueness.isFulfilled``, lines 176-200): no record left (everything suppressed)
  holds; else the fraction ``getNumUniqueTuples(model) / N`` (``getFractionOfUniqueTuples*``,
  ``RiskModelPopulationUniqueness`` lines 149-192) holds when it is > 0 and <= the threshold,
  or when it is 0 and there is no sample unique (no class of size 1); anything else fails. An
  estimate that is NaN or 0 (the model failed) is read as 0, so with sample uniques it fails.
* ``DANKAR`` (the default) is called *without* the Zayatz fallback
  (``getFractionOfUniqueTuplesDankar(false)``, line 189): at a sampling fraction n / N <= 0.1
  Dankar's rule takes Pitman, and when Pitman fails the estimate stays ARX's "unset" -1, so
  the check fails (the ``population-uniqueness`` risk metric falls back to Zayatz there, as
  ARX's risk estimator does). Above 0.1: the smaller of Zayatz and SNB, Zayatz when SNB fails.
* Suppression (``RiskBasedCriterion.enforce``, lines 54-77): if the distribution does not hold
  as it is, ARX suppresses whole classes, smallest first (``HashGroupifyDistribution``'s order,
  lines 120-181: by class size, ties by the class's information loss or its first record), and
  finds how many by a *binary search* (``suppressWhileNotFulfilledBinary``, lines 230-283) over
  the number j of classes suppressed: start with the smallest half of the classes suppressed,
  go towards fewer classes after a check that holds and towards more after one that fails,
  and at the end suppress one more class if the last state checked fails. The estimate is not
  monotone in j, so this is not always the fewest classes; it ends on a j checked to hold.
* Flags: ``super(false, statisticalModel == ZAYATZ, threshold)`` (line 103): monotone with
  generalization only for Zayatz, never monotone with suppression.

**This module.** :meth:`MaxPopulationUniqueness.compute` checks a published table as above;
``model``, ``population_size`` / ``sampling_fraction`` and ``max`` not given are the claimed
ones (then dankar and the USA). :meth:`~MaxPopulationUniqueness.partition_holds` replays ARX's
binary search on the partition's class sizes (the smallest classes first; ties by class
number, which does not change the histogram, so the j found and the records suppressed are
ARX's) and returns False for the j classes it suppresses, all True when the partition holds as
it is. The verdict depends only on the histogram of the classes kept, so it is the one
``compute`` finds on the published records. Both flags are False: one plugin object serves
all four models, and not even Zayatz is monotone (merging the classes of size 4 and 5 of
{1, 3, 4, 4, 5}, N = 5000, raises its fraction from 0.003493 to 0.003519), so the lattice
checks every node (with suppression and a built-in loss, every node its loss bound does not
exclude).

Checked against ARX 3.9.2 on all of Adult with five QIs (docs/algorithms.md): for every node
the records ARX's enforcement suppresses, and the optimum, are the same.

Differences from ARX, on purpose:

* ``sampling_fraction`` fixes n / N for the records under check: N = round(n / fraction) with n
  the records left after suppression (as the risk metric counts it on a published table, and
  as the engine's claim check sees the published records). ARX fixes N from the whole
  dataset before suppression. With ``population_size`` (or the USA default) N is fixed, as ARX.
* ARX leaves records whose every QI is at its hierarchy's top level out of the distribution
  (``HashGroupifyDistribution`` lines 100-118, ``isCompletelyGeneralized``); here they are a
  class like any other (only the top node of the usual hierarchies has such a class).
* No wall-clock limits in the Newton-Raphson solver (see :mod:`anonflow_std.risk.reidentification`).

Suppressed cells (nulls in the published QIs, ``by: values``): the estimators model a
partition into disjoint classes; with wildcards the "classes" overlap and no sound estimate is
defined, so the check is refused with one line (``refuse_null_qis``). A lattice partition
never holds a null (it suppresses whole records).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from anonflow.api import CLASS, InputError, Metric, Param, Partition, StepContext, TypedTable, sql_ident
from anonflow_std.common.wildcard import refuse_null_qis
from anonflow_std.common.uniqueness import (MODEL_CODES, pitman, population_size_for, population_uniqueness, snb,
                                            zayatz)

__version__ = "0.1.0"

NAME = "max-population-uniqueness"
MODELS = ("pitman", "zayatz", "snb", "dankar")


# -- the pure core ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """The estimate ARX's criterion compares: ``fraction`` = ``uniques`` / ``population_size``
    (0 when not available), for ``model``; ``chosen`` is the model Dankar's rule took
    (``"none"`` without a sample unique)."""

    records: int
    classes: int
    sample_uniques: int
    population_size: int
    uniques: float
    fraction: float
    available: bool
    chosen: str

    @property
    def sampling_fraction(self) -> float:
        return self.records / self.population_size if self.population_size else 0.0


def _valid(v: float) -> bool:
    return not math.isnan(v) and v != 0.0


def estimate(sizes: Any, counts: Any, population_size: int, model: str = "dankar") -> Estimate:
    """The population-uniqueness estimate of ``model`` over the frequency of frequencies
    (``counts[i]`` classes of size ``sizes[i]``) for a population of ``population_size``, as
    ARX's criterion reads it: a NaN or 0 estimate is not available (fraction 0), and Dankar's
    rule has no Zayatz fallback (Pitman failing at a sampling fraction <= 0.1 is not available)."""
    s = np.asarray(sizes, dtype=np.int64).ravel()
    c = np.asarray(counts, dtype=np.int64).ravel()
    keep = (s > 0) & (c > 0)
    s, c = s[keep], c[keep]
    n = int((s * c).sum())
    u = int(c.sum())
    c1 = int(c[s == 1].sum())
    N = int(population_size)
    if n and N < n:
        raise InputError(f"{NAME}: the population ({N:,}) is smaller than the {n:,} published records; give "
                         "population_size >= the records, or a sampling_fraction in (0, 1]")
    if n == 0 or c1 == 0:  # no sample unique: every estimate is 0 (ARX), and that holds
        return Estimate(n, u, c1, N, 0.0, 0.0, True, "none")
    if model == "dankar":
        pu = population_uniqueness(s, c, N, models=())
        if pu.sampling_fraction <= 0.1 and pu.dankar_model != "pitman":
            # Pitman failed: ARX's criterion asks for Dankar without the Zayatz fallback
            return Estimate(n, u, c1, N, 0.0, 0.0, False, "pitman")
        uniques, chosen = pu.dankar, pu.dankar_model
    elif model == "pitman":
        uniques, chosen = pitman(s, c, N)[0], "pitman"
    elif model == "zayatz":
        uniques, chosen = zayatz(s, c, N), "zayatz"
    elif model == "snb":
        uniques, chosen = snb(s, c, N), "snb"
    else:
        raise InputError(f"{NAME}: parameter 'model' = {model!r}; expected one of {', '.join(MODELS)}")
    if not _valid(uniques):
        return Estimate(n, u, c1, N, 0.0, 0.0, False, chosen)
    return Estimate(n, u, c1, N, float(uniques), float(uniques) / N, True, chosen)


def holds(est: Estimate, max_fraction: float) -> bool:
    """ARX's ``PopulationUniqueness.isFulfilled``: nothing published, or an estimate in
    (0, max], or 0 with no sample unique."""
    if est.records == 0 or est.sample_uniques == 0:
        return True
    return est.available and 0.0 < est.fraction <= max_fraction


def arx_suppressed_classes(sorted_sizes: np.ndarray, ok) -> int:
    """How many of the classes (``sorted_sizes`` ascending) ARX's
    ``HashGroupifyDistribution.suppressWhileNotFulfilledBinary`` suppresses, given ``ok(j)``:
    whether the distribution holds with the ``j`` smallest classes suppressed (``ok(0)`` is
    False: ARX searches only then). Java's integer division truncates toward zero, so the
    midpoint of (0 + -1) is 0, not -1."""
    c = int(sorted_sizes.shape[0])

    def half(a: int) -> int:
        return a // 2 if a >= 0 else -((-a) // 2)

    low, high = 0, c - 1
    mid = half(low + high)            # entries 0..mid suppressed: j = mid + 1
    while low <= high:
        if ok(mid + 1):
            high = mid - 1
        else:
            low = mid + 1
        mid = half(low + high)
    if not ok(mid + 1) and mid + 1 < c:  # "finally check mid+1": one more class, unchecked by ARX
        mid += 1
    return mid + 1


# -- the plugin ------------------------------------------------------------------------------


class MaxPopulationUniqueness(Metric):
    name = NAME
    version = __version__
    description = ("Estimated population uniqueness (ARX's PopulationUniqueness: Pitman, Zayatz, SNB or Dankar's "
                   "rule) of the published table, as a fraction of the population, at most max.")
    category = "privacy"
    requires_original = False
    params = (
        Param("max", "float", default=None, nullable=True, min=0.0, max=1.0,
              help="largest estimated fraction of the population that is unique (default: the claimed max)"),
        Param("model", "str", default=None, nullable=True, choices=MODELS,
              help="the estimator: pitman, zayatz, snb or dankar (Dankar et al.'s rule; default: the claimed "
                   "model, else dankar, ARX's default)"),
        Param("population_size", "int", default=None, nullable=True, min=1,
              help="records in the population the table was drawn from (default: the claimed population, else the "
                   "USA's 317,238,626, as ARX)"),
        Param("sampling_fraction", "float", default=None, nullable=True, above=0.0, max=1.0,
              help="instead of population_size: records / population (population = round(records / fraction))"),
        Param("by", "str", default=None, nullable=True, choices=("values", "class"),
              help="classes: records sharing the published QI values (default: what an attacker sees), or sharing "
                   "_class"),
    )
    #: the estimates are not monotone under generalization (ARX claims it for Zayatz only) nor
    #: under suppression (ARX: never), and one object serves all four models
    monotone = False
    monotone_with_suppression = False
    weighted_partitions = True

    def check(self, params: Mapping[str, Any], **_: Any) -> None:
        if params.get("population_size") is not None and params.get("sampling_fraction") is not None:
            raise InputError(f"{self.name}: give population_size or sampling_fraction, not both")

    @staticmethod
    def _population(params: Mapping[str, Any], records: int) -> int:
        return population_size_for(records, params.get("population_size"), params.get("sampling_fraction"))

    def _histogram(self, table: TypedTable, params: Mapping[str, Any],
                   ctx: StepContext) -> tuple[np.ndarray, np.ndarray]:
        """The frequency of frequencies of the published classes (a null ``_class`` left out),
        grouped by DuckDB."""
        by = params.get("by") or "values"
        if by == "class":
            if CLASS not in table.columns:
                raise InputError(f"{self.name} by class needs the _class column of an algorithm's output")
            keys = [CLASS]
        else:
            keys = [q for q in table.typing.quasi if q in table.columns]
            if not keys:
                raise InputError(f"{self.name} needs quasi-identifiers in the typing of its input")
            refuse_null_qis(ctx, table, self.name, "its estimators model disjoint classes; evaluate it on a table "
                            "without suppressed cells, or use by: class, or sample-uniqueness (a record "
                            "compatible with no other one)")
        cols = ", ".join(sql_ident(k) for k in keys)
        where = f"WHERE {sql_ident(CLASS)} IS NOT NULL" if CLASS in table.columns else ""
        res = ctx.sql(f"SELECT n, count(*)::BIGINT AS c FROM (SELECT count(*)::BIGINT AS n FROM t {where} "
                      f"GROUP BY {cols}) GROUP BY n ORDER BY n", t=table)
        return (res.column("n").to_numpy(zero_copy_only=False).astype(np.int64),
                res.column("c").to_numpy(zero_copy_only=False).astype(np.int64))

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        self.check(params)
        claim = anonymized.claims.get(self.name, {})
        mx = params.get("max") if params.get("max") is not None else claim.get("max")
        model = params.get("model") or claim.get("model") or "dankar"
        if params.get("population_size") is None and params.get("sampling_fraction") is None:
            params = {**params, "population_size": claim.get("population_size"),
                      "sampling_fraction": claim.get("sampling_fraction")}
            self.check(params)
        sizes, counts = self._histogram(anonymized, params, ctx)
        records = int((sizes * counts).sum())
        est = estimate(sizes, counts, self._population(params, records), model)
        n = self.name
        out = {n: est.fraction, f"{n}.uniques": est.uniques, f"{n}.available": float(est.available),
               f"{n}.sample_uniques": float(est.sample_uniques), f"{n}.records": float(est.records),
               f"{n}.classes": float(est.classes), f"{n}.population_size": float(est.population_size),
               f"{n}.sampling_fraction": est.sampling_fraction}
        if model == "dankar":
            out[f"{n}.dankar_model"] = MODEL_CODES.get(est.chosen, 0.0)
        if mx is not None:
            out.update({f"{n}.max": float(mx), f"{n}.holds": float(holds(est, float(mx)))})
        if est.sample_uniques == 0:
            ctx.note(f"{n}: no sample unique, so no population unique is estimated (0)")
        elif not est.available:
            ctx.note(f"{n}: the {est.chosen} estimate is not available (its solver failed or it is 0); ARX's "
                     "criterion then fails" + (" (Dankar's rule without the Zayatz fallback, as ARX's criterion)"
                                               if model == "dankar" else ""))
        else:
            ctx.note(f"{n}: {est.chosen} estimates {est.uniques:.6g} population uniques of {est.population_size:,} "
                     f"(sampling fraction {est.sampling_fraction:.6g})")
        return out

    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        mx = params.get("max")
        if mx is None:
            raise InputError(f"{self.name} needs max, e.g. model_params: {{max: 0.01, model: dankar}}")
        self.check(params)
        mx = float(mx)
        model = params.get("model") or "dankar"
        sizes = np.asarray(partition.sizes, dtype=np.int64)
        c = sizes.shape[0]
        keep = np.ones(c, dtype=bool)
        if c == 0:
            return keep
        total = int(sizes.sum())
        if params.get("population_size") is not None and int(params["population_size"]) < total:
            raise InputError(f"{self.name}: population_size = {int(params['population_size']):,} is smaller than "
                             f"the table's {total:,} records; expected the size of the population it was drawn from")
        order = np.argsort(sizes, kind="stable")
        ordered = sizes[order]
        memo = partition.cache.setdefault(("_af", self.name, model, mx), {})
        seen: dict[int, bool] = {}

        def ok(j: int) -> bool:  # the distribution with the j smallest classes suppressed
            if j not in seen:
                rest = ordered[j:]
                if rest.size == 0:
                    seen[j] = True
                else:
                    s, cnt = np.unique(rest, return_counts=True)
                    N = self._population(params, int(rest.sum()))
                    key = (N, s.tobytes(), cnt.tobytes())
                    if key not in memo:
                        memo[key] = holds(estimate(s, cnt, N, model), mx)
                    seen[j] = memo[key]
            return seen[j]

        if ok(0):
            return keep
        j = arx_suppressed_classes(ordered, ok)
        if not ok(j):  # cannot happen (the search ends on a state it checked to hold); never claim it
            return np.zeros(c, dtype=bool)
        keep[order[:j]] = False
        return keep


PLUGINS = [MaxPopulationUniqueness()]
