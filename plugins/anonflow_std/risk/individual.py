"""Individual re-identification risk with sampling weights, as sdcMicro's ``measure_risk``
(the Benedetti--Franconi estimator, Franconi and Polettini 2004).

The published records are grouped into *keys*: equal values on every quasi-identifier (a
published generalized label, such as an interval or a set, is one value like any other). For
key ``k`` let ``f_k`` be the number of sample records with it and ``F_k`` the sum of their
sampling weights, the estimated number of population units with it. Given ``f_k``, the
population frequency is modelled as ``F_k = f_k + NegBin(f_k, p_k)`` with ``p_k = f_k / F_k``,
and the risk of each record of key ``k`` is the expected inverse population frequency::

    r_k = E[1 / F_k | f_k] = sum_{h >= f} (1/h) C(h-1, f-1) p^f (1-p)^(h-f)
        = (p / f) * 2F1(1, 1; f + 1; 1 - p)            (f = f_k, p = p_k)

Closed forms (sdcMicro ``R/indivRisk.R``; ``method: exact``, and for f = 1, 2 also ``approx``)::

    f = 1:   r = p / (1-p) * log(1/p)
    f = 2:   r = p / (1-p) - (p / (1-p))^2 * log(1/p)
    f = 3:   r = p (1 - 3p) / (2 (1-p)^2) - (p / (1-p))^3 * log(p)
    f >= 3:  r = p / (f - 1 + p)                       (method: approx, sdcMicro's default)
    f >= 4:  r = (p / f) * 2F1(1, 1; f + 1; 1 - p)     (method: exact)

and ``r = 1 / f`` where ``F_k = f_k`` (the sample is the population for that key: sdcMicro's
``fk == Fk`` case). For ``method: exact`` sdcMicro evaluates an alternating finite series
``(p/(1-p))^f [A (1 + sum_m (-1)^(m+1) prod B) + (-1)^f log p]``; it is the same number (the
tests check both against a direct sum of the series above), but it loses all precision for
large ``f`` and small ``p``, so we use the Gauss hypergeometric form
(``scipy.special.hyp2f1``), whose series has positive terms.

The step's values, over the ``n`` published records (each record carries its key's risk):

* ``individual-risk``: the global risk, ``sum_i r_i / n`` (sdcMicro ``global_risk``);
* ``.expected_reidentifications``: ``sum_i r_i`` (sdcMicro ``global_risk_ER``);
* ``.max``: the highest individual risk;
* ``.above_threshold``: records whose risk is above ``threshold`` (strictly);
* ``.sample_uniques`` (records with ``f_k = 1``), ``.keys`` (distinct keys), ``.records``.

Weights (each record's sampling weight: positive, and a key's weights must sum to at least its
count), in this order of precedence (:func:`weight_source`):

1. the ``weight`` parameter, a numeric column of the table;
2. ``population_size: N``, which gives every record the weight ``N / n`` (simple random
   sampling), even when the table has a typed weight column (the run notes it);
3. the typing's weight column (the typing step's ``weight``, role ``weight``: checked numeric,
   finite and positive there, and published unchanged, so the original and the anonymized
   table both carry it);
4. none: the sample is taken as the whole population and ``r_k = 1 / f_k`` (sdcMicro's
   ``measure_risk`` without ``w``: ``indivRisk(survey = FALSE)``).

Missing values: a null quasi-identifier value is a suppressed cell and matches every value, as
in sdcMicro's ``freqCalc`` (docs/algorithms.md, "Suppressed cells as wildcards"): ``f_k`` is
the key's compatible count (the records agreeing with it wherever both are non-null) and
``F_k`` the sum of their weights (``f_k N / n`` with ``population_size``), each record carries
its key's risk, and ``.keys`` counts the distinct published keys. Without a null the keys are
the plain ``GROUP BY`` ones, as always.

The keys, ``f_k`` and ``F_k`` are computed by DuckDB (one ``GROUP BY`` over the stored
table); the formulas run in numpy over the keys, never over the records.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable, sql_ident

from anonflow_std import __version__
from anonflow_std.common.wildcard import COUNT, WEIGHT, key_counts, null_records

__all__ = ["IndividualRisk", "key_frequencies", "key_risk", "risk_values", "series_risk", "weight_source"]

#: ``p_k`` at least ``1 - POPULATION_TOL`` is taken as ``F_k = f_k`` (risk ``1 / f_k``): weights
#: summing to the count up to rounding (``N / n`` weights with ``N = n``).
POPULATION_TOL = 1e-12
#: ``method: exact`` for ``f_k >= SERIES_FROM`` sums ``SERIES_TERMS`` terms of the hypergeometric
#: series itself (see :func:`_hyp2f1_11`); below, ``scipy.special.hyp2f1``
SERIES_FROM = 30
SERIES_TERMS = 64


def _columns(table: TypedTable, params: Mapping[str, Any], plugin: str) -> list[str]:
    cols = list(params.get("columns") or table.typing.quasi)
    if not cols:
        raise InputError(f"{plugin} needs at least one quasi-identifier; name them under 'quasi' in the typing "
                         "step, or list the key columns with columns:")
    missing = [c for c in cols if c not in table.columns]
    if missing:
        raise InputError(f"{plugin}: column {missing[0]!r} is not in the table")
    return cols


def weight_source(table: TypedTable, params: Mapping[str, Any]) -> tuple[str | None, str]:
    """The weight column the metric uses on ``table`` and where it comes from: ``(column,
    "parameter")`` for the ``weight`` parameter, ``(None, "population_size")``, ``(column,
    "typing")`` for the typing's weight column, or ``(None, "none")``."""
    if params.get("weight") is not None:
        return params["weight"], "parameter"
    if params.get("population_size") is not None:
        return None, "population_size"
    typed = table.typing.weight
    if typed is not None:
        return typed, "typing"
    return None, "none"


def key_frequencies(table: TypedTable, columns: Sequence[str], ctx: StepContext,
                    weight: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(f, F)`` over the keys of ``table`` on ``columns``: the records of each key (int64) and
    the sum of their ``weight`` (float64; the count when ``weight`` is None). DuckDB groups the
    records (nulls form a value of their own); the keys come back ordered by ``(f, F)``, so the
    numbers summed from them do not depend on how DuckDB ordered the groups."""
    by = ", ".join(sql_ident(c) for c in columns)
    w = f"sum(CAST({sql_ident(weight)} AS DOUBLE))" if weight else "CAST(count(*) AS DOUBLE)"
    out = ctx.sql(f"SELECT count(*)::BIGINT AS f, {w} AS F FROM t GROUP BY {by} ORDER BY f, F", t=table)
    return (out.column("f").to_numpy().astype(np.int64, copy=False),
            out.column("F").to_numpy().astype(np.float64, copy=False))


def key_risk(f: np.ndarray, F: np.ndarray, method: str = "approx") -> np.ndarray:
    """The individual risk ``r_k`` of each key from ``f_k`` (sample count) and ``F_k`` (sum of
    weights), vectorized over keys (see the module docstring for the formulas)."""
    f = np.asarray(f, dtype=np.float64)
    F = np.asarray(F, dtype=np.float64)
    if np.any(F < f * (1 - POPULATION_TOL)):
        raise InputError("individual-risk: a key's weights sum to less than its number of records "
                         "(F_k < f_k); sampling weights must stand for at least one unit each")
    r = np.empty(f.shape, dtype=np.float64)
    p = np.divide(f, F, out=np.ones_like(f), where=F > 0)
    pop = p >= 1.0 - POPULATION_TOL
    r[pop] = 1.0 / f[pop]
    s = ~pop
    ps, fs = p[s], f[s]
    odds = ps / (1.0 - ps)
    log_inv = -np.log(ps)
    rs = np.empty(ps.shape, dtype=np.float64)
    one, two, more = fs == 1, fs == 2, fs >= 3
    rs[one] = odds[one] * log_inv[one]
    rs[two] = odds[two] - odds[two] ** 2 * log_inv[two]
    if method == "approx":
        rs[more] = ps[more] / (fs[more] - (1.0 - ps[more]))
    elif method == "exact":
        three = fs == 3
        p3 = ps[three]
        rs[three] = p3 * (1.0 - 3.0 * p3) / (2.0 * (1.0 - p3) ** 2) - odds[three] ** 3 * np.log(p3)
        mid = (fs >= 4) & (fs < SERIES_FROM)
        if mid.any():
            from scipy.special import hyp2f1

            rs[mid] = ps[mid] / fs[mid] * hyp2f1(1.0, 1.0, fs[mid] + 1.0, 1.0 - ps[mid])
        big = fs >= SERIES_FROM
        rs[big] = ps[big] / fs[big] * _hyp2f1_11(fs[big], 1.0 - ps[big])
    else:
        raise InputError(f"individual-risk: method must be 'approx' or 'exact', got {method!r}")
    r[s] = rs
    return r


def _hyp2f1_11(f: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``2F1(1, 1; f + 1; q)`` for ``f >= SERIES_FROM`` by its series ``sum_j t_j``, ``t_0 = 1``,
    ``t_{j+1} = t_j (j + 1) q / (f + 1 + j)``: positive terms, and after ``SERIES_TERMS`` of them
    the rest is below ``1 / C(f + J, J)`` (about ``1e-24`` for ``f = 30``, ``J = 64``), so a fixed
    number of terms is exact to double precision. (``scipy.special.hyp2f1`` returns NaN for
    large ``f`` with small ``1 - q``.) The loop runs over the terms, vectorized over keys."""
    total = np.ones_like(q)
    term = np.ones_like(q)
    for j in range(SERIES_TERMS):
        term = term * ((j + 1.0) * q / (f + 1.0 + j))
        total += term
    return total


def series_risk(f: int, p: float, terms: int = 200_000) -> float:
    """``E[1 / F | f]`` summed directly from its definition (a reference for tests: slow,
    one key): ``sum_{h >= f} (1/h) C(h-1, f-1) p^f (1-p)^(h-f)``, the first ``terms`` terms."""
    from scipy.special import gammaln

    h = np.arange(f, f + terms, dtype=np.float64)
    logc = gammaln(h) - gammaln(f) - gammaln(h - f + 1)
    with np.errstate(divide="ignore"):
        logt = logc + f * np.log(p) + (h - f) * np.log1p(-p) - np.log(h)
    return float(np.exp(logt).sum())


def risk_values(f: np.ndarray, r: np.ndarray, threshold: float, name: str = "individual-risk",
                records: np.ndarray | None = None) -> dict[str, float]:
    """The metric's values from each key's count ``f`` and risk ``r``; each of the key's
    ``records`` (default ``f``; with suppressed cells, the records publishing the key, while
    ``f`` is its compatible count) carries the key's risk."""
    f = np.asarray(f, dtype=np.int64)
    m = f if records is None else np.asarray(records, dtype=np.int64)
    n = int(m.sum())
    expected = float(np.dot(m.astype(np.float64), r)) if n else 0.0
    return {
        name: expected / n if n else 0.0,
        f"{name}.expected_reidentifications": expected,
        f"{name}.max": float(r.max()) if r.size else 0.0,
        f"{name}.above_threshold": float(m[r > threshold].sum()),
        f"{name}.sample_uniques": float(m[f == 1].sum()),
        f"{name}.keys": float(f.size),
        f"{name}.records": float(n),
    }


class IndividualRisk(Metric):
    """sdcMicro's individual risk (``measure_risk``): see the module docstring. Nulls in a
    quasi-identifier are suppressed cells and match any value, as in sdcMicro. Measures the
    table it is given (the anonymized one) over its quasi-identifiers."""

    name = "individual-risk"
    version = __version__
    description = ("Individual re-identification risk with sampling weights (Benedetti-Franconi, as sdcMicro's "
                   "measure_risk): global risk, expected re-identifications, highest risk, records above a threshold.")
    category = "risk"
    requires_original = False
    params = (
        Param("weight", "str", default=None, nullable=True,
              help="column holding each record's sampling weight (positive); default: the typing's weight column"),
        Param("population_size", "float", default=None, nullable=True, above=0,
              help="population size N: every record weighs N / n (used in place of the typing's weight column); "
                   "with no weight at all, the sample is the population (risk 1 / f_k)"),
        Param("method", "str", default="approx", choices=("approx", "exact"),
              help="risk of keys with f_k >= 3: sdcMicro's approximation p/(f-1+p), or the exact expectation"),
        Param("threshold", "float", default=0.1, min=0.0, max=1.0,
              help="count the records whose individual risk is above this (.above_threshold)"),
        Param("columns", "list", items="str", default=None, nullable=True,
              help="key columns (default: the quasi-identifiers)"),
    )

    def check(self, params: Mapping[str, Any], **tables: TypedTable) -> None:
        if params.get("weight") is not None and params.get("population_size") is not None:
            raise InputError("individual-risk: give either weight (a column) or population_size, not both")
        table = tables.get("anonymized") or tables.get("typed")
        if table is None:
            return
        _columns(table, params, self.name)
        weight, source = weight_source(table, params)
        if weight is not None and weight not in table.columns:
            if source == "typing":
                raise InputError(f"individual-risk: the typing's weight column {weight!r} is not in the table "
                                 "(a step before dropped it); give population_size, or weight: a column it has")
            raise InputError(f"individual-risk: weight column {weight!r} is not in the table (declare it under "
                             "weight in the typing step, which publishes it and makes this parameter unneeded)")

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        self.check(params, anonymized=anonymized)
        cols = _columns(anonymized, params, self.name)
        weight, source = weight_source(anonymized, params)
        typed = anonymized.typing.weight
        note = None
        if typed is not None and typed in anonymized.columns and source == "population_size":
            note = (f"individual-risk: population_size {params['population_size']:g} was used (every record "
                    f"weighs N / n) instead of the typing's weight column {typed!r}")
        elif typed is not None and source == "parameter" and weight != typed:
            note = (f"individual-risk: the weight parameter's column {weight!r} was used instead of the typing's "
                    f"weight column {typed!r}")
        if note and note not in getattr(ctx, "notes", ()):  # once, though risk_before measures two tables
            ctx.note(note)
        if weight is not None:
            bad = ctx.sql(f"SELECT count(*) FILTER (WHERE w IS NULL OR NOT isfinite(w) OR w <= 0) AS bad FROM "
                          f"(SELECT TRY_CAST({sql_ident(weight)} AS DOUBLE) AS w FROM t)", t=anonymized)
            if bad.column("bad")[0].as_py():
                raise InputError(f"individual-risk: weight column {weight!r} has {bad.column('bad')[0].as_py()} "
                                 "record(s) whose weight is missing, not a number or not positive")
        if null_records(ctx, anonymized, cols):
            return self._wildcards(anonymized, cols, weight, params, ctx)
        f, F = key_frequencies(anonymized, cols, ctx, weight)
        n = int(f.sum())
        population = params.get("population_size")
        if weight is None and population is not None and n:
            if population < n:
                raise InputError(f"individual-risk: population_size {population:g} is below the {n} records")
            F = f * (float(population) / n)
        r = key_risk(f, F, params.get("method") or "approx")
        return risk_values(f, r, float(params.get("threshold", 0.1)), self.name)


    def _wildcards(self, table: TypedTable, cols: list[str], weight: str | None, params: Mapping[str, Any],
                   ctx: StepContext) -> dict[str, float]:
        """Nulls in the key columns: sdcMicro's ``fk`` / ``Fk`` with missing values matching any
        value, per distinct published key; each of the key's ``n`` records carries its risk."""
        keys = key_counts(ctx, table, cols, weight)
        m = keys.column("_af_n").to_numpy(zero_copy_only=False).astype(np.int64)
        f = keys.column(COUNT).to_numpy(zero_copy_only=False).astype(np.int64)
        F = keys.column(WEIGHT).to_numpy(zero_copy_only=False).astype(np.float64) if weight else f.astype(np.float64)
        n = int(m.sum())
        population = params.get("population_size")
        if weight is None and population is not None and n:
            if population < n:
                raise InputError(f"individual-risk: population_size {population:g} is below the {n} records")
            F = f * (float(population) / n)
        r = key_risk(f, F, params.get("method") or "approx")
        ctx.note(f"{self.name}: {null_records(ctx, table, cols)} record(s) with suppressed cells, counted as "
                 "wildcards (f_k = compatible count, F_k = the compatible records' weights)")
        return risk_values(f, r, float(params.get("threshold", 0.1)), self.name, records=m)


PLUGINS = [IndividualRisk()]
