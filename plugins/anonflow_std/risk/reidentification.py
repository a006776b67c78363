"""Re-identification risk models of ARX: prosecutor, journalist and marketer risk, sample
uniqueness and population uniqueness (Pitman, Zayatz, SNB and Dankar et al.'s decision rule).

Every model works on the *equivalence classes* of the published table: the records with equal
values on every quasi-identifier (a published generalized value, such as an interval label, is
just a value compared for equality). DuckDB groups the records and hands back only the
*frequency of frequencies* -- how many classes have each size -- so everything downstream is
numpy over a few hundred numbers, whatever the number of records.

Missing values: a null quasi-identifier cell is a suppressed cell and matches any value
(docs/algorithms.md, "Suppressed cells as wildcards"; sdcMicro's ``freqCalc``, and ARX lets a
suppressed value match anything too). With nulls, a record's class size is its *compatible
count* f (the records agreeing with it wherever both are non-null, itself included): the
prosecutor risk of a record is 1 / f (highest 1 / min f, lowest 1 / max f, average the mean of
1 / f over the records, at risk when 1 / f > threshold), a sample unique is a record with f = 1,
and ``.classes`` counts the distinct published keys. The journalist risk against a population,
and the population-uniqueness estimates (which model a frequency-of-frequencies of disjoint
classes), are refused for a table with nulls. Without a null nothing changes.

The formulas follow ARX (https://github.com/arx-deidentifier/arx, ``src/main/org/deidentifier/
arx/risk/``, read at commit aacd487f) to the letter, including its conventions:

- ``RiskModelSampleSummary``: a record is *at risk* when ``1 / class size > threshold``
  (strictly greater, the raw threshold, in floating point); highest risk ``1 / smallest
  class``, lowest risk ``1 / largest class``, prosecutor success rate ``classes / records``;
  the journalist's sizes are the classes' sizes in the population table and its success rate
  is ``max(classes / sum F_j, sum(f_j / F_j) / records)``; the marketer's is
  ``sum(f_j / F_j) / records`` (``classes / records`` without a population). An empty table
  gives 0 everywhere.
- ``RiskModelSampleUniqueness``: records in classes of size 1, and their fraction.
- ``RiskModelPopulationUniqueness`` and ``ModelPitman`` / ``ModelZayatz`` / ``ModelSNB``: the
  estimated number of population uniques, ``0`` when the sample has no unique (and then the
  "model" is ARX's ``DANKAR`` placeholder), an estimate that is NaN or 0 reported as 0
  ("not available"); Dankar's rule: sampling fraction ``<= 0.1`` takes Pitman, or Zayatz when
  Pitman is not available; above, the smaller of Zayatz and SNB when SNB is available, else
  Zayatz. The Newton-Raphson solver is a port of ``de.linearbits.newtonraphson.NewtonRaphson2D``
  as ARX configures it (accuracy 1e-6, 1,000 iterations per try, the given start then 16
  prepared start values), without its wall-clock limits (100 ms a try, 1 s a solve), which
  would make the figures depend on the machine.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable, sql_ident

from anonflow_std import __version__
from anonflow_std.common.population import population_counts
from anonflow_std.common.uniqueness import (MODEL_CODES, MODELS, PopulationUniqueness, RiskSummary, journalist_risk,
                                            marketer_risk, population_size_for, population_uniqueness,
                                            prosecutor_risk, sample_uniqueness)
from anonflow_std.common.wildcard import COUNT, key_counts, null_records, refuse_nulls

__all__ = [
    "sample_histogram_sql", "wildcard_histogram_sql", "wildcard_prosecutor_risk", "population_pairs_sql",
    "ReidentificationRisk", "SampleUniqueness", "PopulationUniquenessMetric",
]

# -- class sizes in DuckDB ------------------------------------------------------------------------

def _quasi(table: TypedTable, plugin: str) -> list[str]:
    quasi = list(table.typing.quasi)
    if not quasi:
        raise InputError(f"{plugin} needs at least one quasi-identifier; name them under 'quasi' in the typing step")
    missing = [q for q in quasi if q not in table.columns]
    if missing:
        raise InputError(f"{plugin}: quasi-identifier {missing[0]!r} is not in the table")
    return quasi


def sample_histogram_sql(ctx: StepContext, table: TypedTable, quasi: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The frequency of frequencies of ``table``'s classes over ``quasi``, grouped by DuckDB
    (nulls group together, as one value)."""
    cols = ", ".join(sql_ident(q) for q in quasi)
    res = ctx.sql(f"SELECT n, count(*)::BIGINT AS c FROM (SELECT count(*)::BIGINT AS n FROM t GROUP BY {cols}) "
                  "GROUP BY n ORDER BY n", t=table)
    return (res.column("n").to_numpy(zero_copy_only=False).astype(np.int64),
            res.column("c").to_numpy(zero_copy_only=False).astype(np.int64))


def wildcard_histogram_sql(ctx: StepContext, table: TypedTable,
                           quasi: list[str]) -> tuple[np.ndarray, np.ndarray, int] | None:
    """With nulls in ``quasi`` (suppressed cells, wildcards): ``(f, records, keys)`` -- each
    compatible count f, the records having it, and the distinct published keys; None without a
    null (then :func:`sample_histogram_sql` counts the classes)."""
    if not null_records(ctx, table, quasi):
        return None
    keys = key_counts(ctx, table, quasi)
    res = ctx.sql(f"SELECT {COUNT} AS f, sum(_af_n)::BIGINT AS r FROM k GROUP BY f ORDER BY f", k=keys)
    return (res.column("f").to_numpy(zero_copy_only=False).astype(np.int64),
            res.column("r").to_numpy(zero_copy_only=False).astype(np.int64), keys.num_rows)


def wildcard_prosecutor_risk(f: Any, records: Any, threshold: float = 0.2) -> RiskSummary:
    """The prosecutor risk when ``records[i]`` records have compatible count ``f[i]``: each
    record's risk is 1 / f (without a null, f is the class size and this is
    :func:`prosecutor_risk`)."""
    f = np.asarray(f, dtype=np.float64)
    r = np.asarray(records, dtype=np.float64)
    n = float(r.sum())
    if n == 0:
        return RiskSummary(float(threshold), 0.0, 0.0, 0.0, 0.0)
    at_risk = float(r[1.0 / f > threshold].sum()) / n
    return RiskSummary(float(threshold), at_risk, 1.0 / float(f.min()), float((r / f).sum()) / n,
                       1.0 / float(f.max()))


def population_pairs_sql(ctx: StepContext, table: TypedTable, population: TypedTable,
                         quasi: list[str], plugin: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(f, F, count)``: each published class's size ``f`` and its size ``F`` in ``population``,
    with how many classes share the pair. The population is matched to the published values
    as delta-presence and k-map match it: a QI published as it is compares as it is, a QI
    published as hierarchy labels (a ``lattice`` output) is generalized through its
    hierarchy to the published level (:func:`anonflow_std.privacy.population_models.population_counts`).
    A published class absent from the population is an error (ARX requires the population to
    be a superset of the sample)."""
    counts = population_counts(table, population, plugin, ctx, quasi)
    res = ctx.sql("SELECT n AS f, pn AS pf, count(*)::BIGINT AS c FROM counts GROUP BY n, pn ORDER BY n, pn",
                  counts=counts)
    f = res.column("f").to_numpy(zero_copy_only=False).astype(np.int64)
    pf = res.column("pf").to_numpy(zero_copy_only=False).astype(np.int64)
    c = res.column("c").to_numpy(zero_copy_only=False).astype(np.int64)
    if (pf == 0).any():
        missing = int(c[pf == 0].sum())
        raise InputError(f"{plugin}: {missing:,} class(es) of the published table do not occur in the population "
                         "table; the population must hold every published record (same quasi-identifier values, "
                         "or values its hierarchies generalize to the published labels)")
    return f, pf, c


# -- metric plugins -------------------------------------------------------------------------------

class ReidentificationRisk(Metric):
    name = "reidentification-risk"
    version = __version__
    description = ("ARX's prosecutor, journalist and marketer re-identification risks over the classes of equal "
                   "quasi-identifier values (highest, average, lowest, records at risk).")
    category = "risk"
    requires_original = False
    params = (
        Param("threshold", "float", default=0.2, min=0.0, max=1.0,
              help="a record is at risk when 1 / its class size exceeds this (ARX: strictly greater)"),
        Param("population", "step", default=None, nullable=True,
              help="the step or source holding the population for the journalist and marketer models "
                   "(default: none, the sample is its own population)"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        quasi = _quasi(anonymized, self.name)
        t = float(params.get("threshold", 0.2))
        if params.get("population"):
            refuse_nulls(ctx, anonymized, quasi, self.name, "the journalist and marketer risks against a population "
                         "are not implemented for wildcards; leave 'population' out (the prosecutor risk counts "
                         "suppressed cells as wildcards), or evaluate a table without suppressed cells")
        wild = wildcard_histogram_sql(ctx, anonymized, quasi)
        if wild is not None:
            f, recs, keys = wild
            pros = wildcard_prosecutor_risk(f, recs, t)
            ctx.note(f"{self.name}: {int(null_records(ctx, anonymized, quasi))} record(s) with suppressed cells, "
                     "counted as wildcards (class size = compatible count); no population table: journalist risk = "
                     "prosecutor risk, marketer risk = the average of 1 / compatible count")
            out = {self.name: pros.highest}
            for label in ("prosecutor", "journalist"):
                out.update({f"{self.name}.{label}.highest": pros.highest,
                            f"{self.name}.{label}.average": pros.success_rate,
                            f"{self.name}.{label}.lowest": pros.lowest,
                            f"{self.name}.{label}.records_at_risk": pros.records_at_risk})
            out.update({f"{self.name}.journalist.population": 0.0, f"{self.name}.marketer": pros.success_rate,
                        f"{self.name}.threshold": t, f"{self.name}.records": float(recs.sum()),
                        f"{self.name}.classes": float(keys)})
            return out
        sizes, counts = sample_histogram_sql(ctx, anonymized, quasi)
        pros = prosecutor_risk(sizes, counts, t)
        jour, market, used = pros, marketer_risk(sizes, None, counts), 0.0
        if params.get("population"):
            population = ctx.table(params["population"])
            f, F, c = population_pairs_sql(ctx, anonymized, population, quasi, self.name)
            if (F < f).any():
                ctx.note(f"{self.name}: some classes are larger in the published table than in the population "
                         f"{params['population']!r}; is it really the population the table was drawn from?")
            jour, market, used = journalist_risk(f, F, c, t), marketer_risk(f, F, c), 1.0
        else:
            ctx.note(f"{self.name}: no population table; journalist risk = prosecutor risk, marketer risk = "
                     "classes / records")
        n = int((sizes * counts).sum())
        out = {self.name: pros.highest}
        for label, r in (("prosecutor", pros), ("journalist", jour)):
            out.update({f"{self.name}.{label}.highest": r.highest, f"{self.name}.{label}.average": r.success_rate,
                        f"{self.name}.{label}.lowest": r.lowest,
                        f"{self.name}.{label}.records_at_risk": r.records_at_risk})
        out.update({f"{self.name}.journalist.population": used, f"{self.name}.marketer": market,
                    f"{self.name}.threshold": t, f"{self.name}.records": float(n),
                    f"{self.name}.classes": float(counts.sum())})
        return out


class SampleUniqueness(Metric):
    name = "sample-uniqueness"
    version = __version__
    description = "Fraction of records that are unique on the quasi-identifiers (classes of size 1; ARX's sample uniques)."
    category = "risk"
    requires_original = False
    params = ()

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        quasi = _quasi(anonymized, self.name)
        wild = wildcard_histogram_sql(ctx, anonymized, quasi)
        if wild is not None:  # a sample unique is a record compatible with no other one
            f, recs, keys = wild
            n = int(recs.sum())
            uniques = int(recs[f == 1].sum())
            return {self.name: uniques / n if n else 0.0, f"{self.name}.uniques": float(uniques),
                    f"{self.name}.records": float(n), f"{self.name}.classes": float(keys)}
        sizes, counts = sample_histogram_sql(ctx, anonymized, quasi)
        uniques, fraction = sample_uniqueness(sizes, counts)
        return {self.name: fraction, f"{self.name}.uniques": float(uniques),
                f"{self.name}.records": float((sizes * counts).sum()), f"{self.name}.classes": float(counts.sum())}


class PopulationUniquenessMetric(Metric):
    name = "population-uniqueness"
    version = __version__
    description = ("Estimated fraction of the population that is unique on the quasi-identifiers (ARX: Pitman, "
                   "Zayatz, SNB, or Dankar et al.'s choice among them), from the sampling fraction.")
    category = "risk"
    requires_original = False
    params = (
        Param("population_size", "int", default=None, nullable=True, min=1,
              help="records in the population the table was drawn from (default: the USA's 317,238,626, as ARX)"),
        Param("sampling_fraction", "float", default=None, nullable=True, above=0.0, max=1.0,
              help="instead of population_size: records / population (population = round(records / fraction))"),
        Param("model", "str", default="dankar", choices=MODELS,
              help="the estimate reported as the headline: pitman, zayatz, snb or dankar (Dankar et al.'s rule)"),
    )

    def check(self, params: Mapping[str, Any], **_: Any) -> None:
        if params.get("population_size") is not None and params.get("sampling_fraction") is not None:
            raise InputError(f"{self.name}: give population_size or sampling_fraction, not both")

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        self.check(params)
        quasi = _quasi(anonymized, self.name)
        refuse_nulls(ctx, anonymized, quasi, self.name, "its estimators model disjoint classes; evaluate it on a table "
                     "without suppressed cells, or use sample-uniqueness (a record compatible with no other one)")
        sizes, counts = sample_histogram_sql(ctx, anonymized, quasi)
        n = int((sizes * counts).sum())
        model = params.get("model", "dankar")
        N = population_size_for(n, params.get("population_size"), params.get("sampling_fraction")) if n else 0
        if n == 0:
            pu = PopulationUniqueness(float(N), 0.0, 0, 0.0, 0.0, 0.0, 0.0, "none")
        else:
            pu = population_uniqueness(sizes, counts, N)
        out = {self.name: pu.fraction(model), f"{self.name}.uniques": pu.uniques(model),
               f"{self.name}.available": float(pu.available(model))}
        for m in MODELS:
            out[f"{self.name}.{m}"] = pu.fraction(m)
        out.update({f"{self.name}.dankar_model": MODEL_CODES[pu.dankar_model],
                    f"{self.name}.population_size": float(N), f"{self.name}.sampling_fraction": pu.sampling_fraction,
                    f"{self.name}.sample_uniques": float(pu.sample_uniques), f"{self.name}.records": float(n)})
        if pu.sample_uniques:
            ctx.note(f"{self.name}: Dankar's rule chose {pu.dankar_model} (sampling fraction "
                     f"{pu.sampling_fraction:.6g}); Pitman solved {pu.pitman_solver or 'not computed'}; estimates "
                     + ", ".join(f"{m} {pu.uniques(m):.6g}" for m in ("pitman", "zayatz", "snb"))
                     + (f"; {model} not available (reported 0)" if not pu.available(model) else ""))
        else:
            ctx.note(f"{self.name}: no sample unique, so no population unique is estimated (0)")
        return out


PLUGINS = [ReidentificationRisk(), SampleUniqueness(), PopulationUniquenessMetric()]
