"""Re-identification risk and population uniqueness as ARX computes them, from a table's
frequency of frequencies (how many classes have each size): prosecutor, journalist and
marketer risk, sample uniqueness, and the population-uniqueness estimates (Pitman, Zayatz,
SNB and Dankar et al.'s decision rule) with ARX's Newton-Raphson solver. Shared by the risk
metrics (:mod:`anonflow_std.risk.reidentification`) and the privacy model
``max-population-uniqueness`` (:mod:`anonflow_std.privacy.population_uniqueness`); the
conventions followed, to the letter, are listed in the risk module's docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from scipy import special

from anonflow.api import InputError


#: ARX's ``ARXPopulationModel.Region.USA``, the population ``DataHandle.getRiskEstimator()`` uses
USA_POPULATION = 317_238_626
#: ARX's Zayatz model passes the population and sample sizes to commons-math's hypergeometric
#: distribution as Java ints, capped at Integer.MAX_VALUE (``ModelZayatz`` lines 84-91)
_INT_MAX = 2**31 - 1

# -- ARX's solver configuration (ARXSolverConfiguration) ------------------------------------

ACCURACY = 1e-6
ITERATIONS_PER_TRY = 1000


def _start_values() -> list[tuple[float, float]]:
    """``ARXSolverConfiguration.getDefaultStartValues()``: d1, d2 = 0, 0.33, 0.66, 0.99
    (``for (d = 0; d < 1; d += 0.33)``, the same floating-point sums)."""
    steps, d = [], 0.0
    while d < 1.0:
        steps.append(d)
        d += 0.33
    return [(a, b) for a in steps for b in steps]


START_VALUES = _start_values()
#: ``NewtonRaphson2D.configure``: with prepared start values, (their number + 1) * per try
ITERATIONS_TOTAL = (len(START_VALUES) + 1) * ITERATIONS_PER_TRY


# -- frequency of frequencies -----------------------------------------------------------------

def class_size_histogram(class_sizes: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(sizes, counts)``: the distinct class sizes in ascending order and how many classes
    have each (ARX's ``RiskModelHistogram``). Zero sizes are dropped."""
    s = np.asarray(class_sizes, dtype=np.int64).ravel()
    s = s[s > 0]
    sizes, counts = np.unique(s, return_counts=True)
    return sizes.astype(np.int64), counts.astype(np.int64)


def _hist(sizes: Any, counts: Any) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(sizes, dtype=np.int64).ravel()
    c = np.ones_like(s) if counts is None else np.asarray(counts, dtype=np.int64).ravel()
    if s.shape != c.shape:
        raise ValueError("sizes and counts differ in length")
    keep = (s > 0) & (c > 0)
    return s[keep], c[keep]


def _count_of_size(sizes: np.ndarray, counts: np.ndarray, size: int) -> int:
    return int(counts[sizes == size].sum())


# -- sample-based risks (RiskModelSampleSummary) ----------------------------------------------

@dataclass(frozen=True)
class RiskSummary:
    """ARX's ``RiskSummary``: ``records_at_risk`` (rA), ``highest`` (rB), ``success_rate``
    (rC, also ARX's "average risk") and ``lowest`` (rM), for ``threshold``."""

    threshold: float
    records_at_risk: float
    highest: float
    success_rate: float
    lowest: float

    @property
    def average(self) -> float:
        return self.success_rate


def prosecutor_risk(sizes: Any, counts: Any = None, threshold: float = 0.2) -> RiskSummary:
    """Prosecutor risk over classes of ``sizes`` (``counts[i]`` classes of size ``sizes[i]``;
    ``counts=None``: one class per entry, i.e. ``sizes`` are the class sizes)::

        records_at_risk = sum(s_j * [1/s_j > threshold]) / n
        highest = 1 / min s_j      lowest = 1 / max s_j      success_rate = classes / n

    (``RiskModelSampleSummary.getProsecutorRisk``; an empty table gives zeros.)"""
    s, c = _hist(sizes, counts)
    n = float((s * c).sum())
    if n == 0:
        return RiskSummary(float(threshold), 0.0, 0.0, 0.0, 0.0)
    sf = s.astype(np.float64)
    at_risk = float((sf * c)[1.0 / sf > threshold].sum()) / n
    return RiskSummary(float(threshold), at_risk, 1.0 / float(sf.min()), float(c.sum()) / n, 1.0 / float(sf.max()))


def journalist_risk(sample_sizes: Any, population_sizes: Any = None, counts: Any = None,
                    threshold: float = 0.2) -> RiskSummary:
    """Journalist risk: each sample class ``j`` (``f_j`` records) has ``F_j`` records in the
    population (``population_sizes``, aligned with ``sample_sizes``; ``counts[i]``: how many
    classes share the pair ``(f, F)``)::

        records_at_risk = sum(f_j * [1/F_j > threshold]) / n
        highest = 1 / min F_j      lowest = 1 / max F_j
        success_rate = max(classes / sum F_j, sum(f_j / F_j) / n)

    Without ``population_sizes`` the population is the sample (``F_j = f_j``) and this is the
    prosecutor risk (``RiskModelSampleSummary.getJournalistRisk``)."""
    if population_sizes is None:
        return prosecutor_risk(sample_sizes, counts, threshold)
    f = np.asarray(sample_sizes, dtype=np.float64).ravel()
    F = np.asarray(population_sizes, dtype=np.float64).ravel()
    c = np.ones_like(f) if counts is None else np.asarray(counts, dtype=np.float64).ravel()
    n = float((f * c).sum())
    if n == 0:
        return RiskSummary(float(threshold), 0.0, 0.0, 0.0, 0.0)
    at_risk = float((f * c)[1.0 / F > threshold].sum()) / n
    rc1 = float(c.sum()) / float((F * c).sum())
    rc2 = float((c * f / F).sum()) / n
    return RiskSummary(float(threshold), at_risk, 1.0 / float(F.min()), max(rc1, rc2), 1.0 / float(F.max()))


def marketer_risk(sample_sizes: Any, population_sizes: Any = None, counts: Any = None) -> float:
    """Marketer risk, the expected fraction of records re-identified: ``sum(f_j / F_j) / n``;
    without a population ``F_j = f_j`` and it is ``classes / n``
    (``RiskModelSampleSummary.getMarketerRisk``; 0 for an empty table)."""
    f = np.asarray(sample_sizes, dtype=np.float64).ravel()
    F = f if population_sizes is None else np.asarray(population_sizes, dtype=np.float64).ravel()
    c = np.ones_like(f) if counts is None else np.asarray(counts, dtype=np.float64).ravel()
    n = float((f * c).sum())
    if n == 0:
        return 0.0
    return float((c * f / F).sum()) / n


def sample_uniqueness(sizes: Any, counts: Any = None) -> tuple[int, float]:
    """``(uniques, fraction)``: the records in classes of size 1 and their fraction of all
    records (``RiskModelSampleUniqueness``; ``(0, 0.0)`` for an empty table)."""
    s, c = _hist(sizes, counts)
    n = int((s * c).sum())
    if n == 0:
        return 0, 0.0
    u = _count_of_size(s, c, 1)
    return u, u / n


# -- population model ---------------------------------------------------------------------------

def population_size_for(records: int, population_size: int | None = None,
                        sampling_fraction: float | None = None) -> int:
    """The population size ARX uses: ``population_size``, else ``round(records /
    sampling_fraction)`` (``ARXPopulationModel.create(sampleSize, fraction)``: Java's
    ``Math.round``, halves up), else the USA's 317,238,626."""
    if population_size is not None and sampling_fraction is not None:
        raise InputError("give population_size or sampling_fraction, not both")
    if population_size is not None:
        return int(population_size)
    if sampling_fraction is not None:
        if not 0 < sampling_fraction <= 1:
            raise InputError(f"sampling_fraction must be in (0, 1], got {sampling_fraction}")
        return int(math.floor(records / sampling_fraction + 0.5))
    return USA_POPULATION


# -- ARX's digamma and trigamma (risk/Gamma.java) -------------------------------------------------

_DIGAMMA_1 = -0.57721566490153286060651209008240243104215933593992
_TRIGAMMA_1 = math.pi * math.pi / 6.0
_TETRAGAMMA_1 = -2.0 * 1.202056903159594285399738161511449990764986292
_S3, _S4, _S5, _S6, _S7 = 1 / 12, 1 / 120, 1 / 252, 1 / 240, 1 / 132
_B2, _B4, _B6, _B8, _B10 = 1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66


def arx_digamma(x: Any) -> np.ndarray:
    """ARX's ``Gamma.digamma`` (reflection below 0, Taylor series up to 1e-6, recurrence up to
    12, then de Moivre's expansion), vectorized."""
    x = np.array(x, dtype=np.float64, ndmin=1, copy=True)
    out = np.zeros_like(x)
    with np.errstate(all="ignore"):
        bad = ~np.isfinite(x)
        zero = x == 0
        neg = (x < 0) & ~bad
        refl = np.where(neg, math.pi / np.tan(-math.pi * x), 0.0)
        y = np.where(neg, 1.0 - x, x)
        y = np.where(bad | zero, 12.0, y)
        small = (y <= 1e-6) & ~neg
        y0 = y.copy()
        y = np.where(small, 12.0, y)
        low = y < 12.0
        while low.any():
            out[low] -= 1.0 / y[low]
            y[low] += 1.0
            low = y < 12.0
        r = 1.0 / y
        out += np.log(y) - 0.5 * r
        r = r * r
        out -= r * (_S3 - r * (_S4 - r * (_S5 - r * (_S6 - r * _S7))))
        out = np.where(small, (_DIGAMMA_1 - 1.0 / y0) + _TRIGAMMA_1 * y0, out)
        out = out + refl
    out[zero] = -np.inf
    out[bad] = np.nan
    return out


def _arx_trigamma_pos(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    with np.errstate(all="ignore"):
        small = x <= 1e-4
        y = np.where(small, 8.0, x)
        low = y < 8.0
        while low.any():
            out[low] += 1.0 / (y[low] * y[low])
            y[low] += 1.0
            low = y < 8.0
        # ARX applies the asymptotic series only from 12 (LARGE_DIGAMMA), though it stops the
        # recurrence at 8 (LARGE_TRIGAMMA): for y in [8, 12) the tail is left out. Kept as is.
        r = 1.0 / (y * y)
        tail = 0.5 * r + (1.0 + r * (_B2 + r * (_B4 + r * (_B6 + r * (_B8 + r * _B10))))) / y
        out = np.where(y >= 12.0, out + tail, out)
        out = np.where(small, 1.0 / (x * x) + _TRIGAMMA_1 + _TETRAGAMMA_1 * x, out)
    return out


def arx_trigamma(x: Any) -> np.ndarray:
    """ARX's ``Gamma.trigamma``, vectorized, *with its quirk*: the recurrence stops at 8 but the
    asymptotic tail is added only from 12, so for arguments below 12 the tail (about ``1/x``)
    is missing. ARX uses it only in the Jacobian of Pitman's closed form, i.e. it changes the
    Newton path, not the equations solved."""
    x = np.array(x, dtype=np.float64, ndmin=1, copy=True)
    with np.errstate(all="ignore"):
        bad = ~np.isfinite(x)
        zero = x == 0
        neg = (x < 0) & ~bad
        pos = np.where(neg | bad | zero, 1.0, x)
        out = _arx_trigamma_pos(pos)
        if neg.any():
            r = math.pi / np.sin(-math.pi * x[neg])
            out[neg] = -_arx_trigamma_pos(1.0 - x[neg]) + r * r
    out[zero] = -np.inf
    out[bad] = np.nan
    return out


def _dg(x: float) -> float:
    """:func:`arx_digamma` for one number, in plain Python (the solver calls it per step)."""
    if math.isinf(x) or math.isnan(x):
        return math.nan
    if x == 0.0:
        return -math.inf
    if x < 0.0:
        t = math.tan(-math.pi * x)
        return _dg(1.0 - x) + (math.pi / t if t != 0.0 else math.copysign(math.inf, t))
    if x <= 1e-6:
        return (_DIGAMMA_1 - (1.0 / x)) + (_TRIGAMMA_1 * x)
    result = 0.0
    while x < 12.0:
        result -= 1.0 / x
        x += 1.0
    r = 1.0 / x
    result += math.log(x) - (0.5 * r)
    r *= r
    result -= r * (_S3 - (r * (_S4 - (r * (_S5 - (r * (_S6 - (r * _S7))))))))
    return result


def _tg(x: float) -> float:
    """:func:`arx_trigamma` for one number, in plain Python (with ARX's quirk)."""
    if math.isinf(x) or math.isnan(x):
        return math.nan
    if x == 0.0:
        return -math.inf
    if x < 0.0:
        sn = math.sin(-math.pi * x)
        r = math.pi / sn if sn != 0.0 else math.copysign(math.inf, sn)
        return -_tg(1.0 - x) + (r * r)
    if x <= 1e-4:
        return (1.0 / (x * x)) + _TRIGAMMA_1 + (_TETRAGAMMA_1 * x)
    result = 0.0
    while x < 8.0:
        result += 1.0 / (x * x)
        x += 1.0
    if x >= 12.0:
        r = 1.0 / (x * x)
        result += (0.5 * r) + ((1.0 + (r * (_B2 + (r * (_B4 + (r * (_B6 + (r * (_B8 + (r * _B10)))))))))) / x)
    return result


# -- NewtonRaphson2D ------------------------------------------------------------------------------

@dataclass
class SolverResult:
    x: float
    y: float
    iterations: int
    converged: bool


def newton_raphson_2d(function: Callable[[float, float], tuple[float, float, float, float, float, float]],
                      start: tuple[float, float],
                      constraint: Callable[[float, float], bool] | None = None) -> SolverResult:
    """``de.linearbits.newtonraphson.NewtonRaphson2D._solve`` as ARX configures it.

    ``function(x, y) -> (f1, f2, j11, j12, j21, j22)``. A try starts from ``start``, then from
    each of :data:`START_VALUES`; it stops when ``|f1|, |f2| <= 1e-6`` (the point is the
    result), or after the step when the constraint fails, the point is NaN or the try made
    more than 1,000 steps. As in the library, the run ends right after the first step from the
    last prepared start value, and when the total number of evaluations exceeds
    (16 + 1) * 1,000. No wall-clock limits. NaN, NaN when nothing converged."""
    total = 0
    offset = 0
    first = True
    with np.errstate(all="ignore"):
        while total <= ITERATIONS_TOTAL:
            if first:
                x, y = np.float64(start[0]), np.float64(start[1])
                first = False
            else:
                x, y = np.float64(START_VALUES[offset][0]), np.float64(START_VALUES[offset][1])
                offset += 1
            iterations = 0
            while True:
                total += 1
                f1, f2, a11, a12, a21, a22 = (np.float64(v) for v in function(float(x), float(y)))
                if abs(f1) <= ACCURACY and abs(f2) <= ACCURACY:
                    return SolverResult(float(x), float(y), total, True)
                scalar = np.float64(1.0) / (a11 * a22 - a12 * a21)
                i11, i12, i21, i22 = a22 * scalar, -a12 * scalar, -a21 * scalar, a11 * scalar
                x = x - (i11 * f1 + i12 * f2)
                y = y - (i21 * f1 + i22 * f2)
                if offset == len(START_VALUES):
                    return SolverResult(math.nan, math.nan, total, False)
                if constraint is not None and not constraint(float(x), float(y)):
                    break
                if math.isnan(x) or math.isnan(y):
                    break
                if iterations >= ITERATIONS_PER_TRY:
                    break
                iterations += 1
    return SolverResult(math.nan, math.nan, total, False)


# -- Zayatz (ModelZayatz) -------------------------------------------------------------------------

def _hypergeometric_p1(M: int, K: np.ndarray, N: int) -> np.ndarray:
    """``P(X = 1)`` for ``X`` hypergeometric: ``N`` draws from ``M`` items of which ``K``
    (an array) are successes; ``K N / M * prod_{0<i<K} (1 - (N - 1) / (M - i))``, the product
    as a cumulative sum of ``log1p`` up to the largest ``K`` (exact to rounding, where
    ``gammaln`` differences would lose digits at a population of 3e8)."""
    K = np.asarray(K, dtype=np.int64)
    kmax = int(K.max()) if K.size else 1
    i = np.arange(1, kmax, dtype=np.float64)
    with np.errstate(all="ignore"):
        ratio = (N - 1) / (M - i)
        terms = np.where(ratio >= 1.0, -np.inf, np.log1p(-np.minimum(ratio, 1.0)))
        logs = np.concatenate(([0.0], np.cumsum(terms)))
        return np.where(K > M, 0.0, K * (N / M) * np.exp(logs[K - 1]))


def zayatz(sizes: Any, counts: Any, population_size: float) -> float:
    """Zayatz (1991) as ``ModelZayatz``: with ``u`` classes, ``c_k`` of size ``k``, ``n``
    records, ``N`` the population, ``f = n / N`` and ``h_k = P(X = 1)`` for ``X`` hypergeometric
    (population ``N``, ``k`` successes, ``n`` draws; ``N`` and ``n`` capped at 2^31 - 1 as ARX
    passes them as Java ints)::

        uniqueness = (c_1 / u * h_1) / sum_k (c_k / u * h_k)
        uniques    = c_1 * uniqueness / f

    The raw estimate (NaN possible); ARX reports NaN and 0 as 0."""
    s, c = _hist(sizes, counts)
    n = float((s * c).sum())
    u = float(c.sum())
    c1 = _count_of_size(s, c, 1)
    if n == 0:
        return math.nan
    M = min(int(population_size), _INT_MAX)
    N = min(int(n), _INT_MAX)
    with np.errstate(all="ignore"):
        h = _hypergeometric_p1(M, s, N)
        temp = float(((c / u) * h).sum())
        h1 = float(_hypergeometric_p1(M, np.array([1]), N)[0])
        uniqueness = np.float64((c1 / u) * h1) / np.float64(temp)
        return float(np.float64(c1) * uniqueness / np.float64(n / float(population_size)))


# -- Pitman (ModelPitman) -------------------------------------------------------------------------

def _pitman_closed(s: np.ndarray, c: np.ndarray, u: float, n: float):
    """``getMasterFunctionClosed``: the likelihood equations in digamma form, their Jacobian
    with ARX's trigamma."""
    other = s != 1
    so, co = s[other].astype(np.float64), c[other].astype(np.float64)

    def f(t: float, a: float):
        with np.errstate(all="ignore"):
            t, a = np.float64(t), np.float64(a)   # Java double semantics: x / 0 is inf, not an error
            val0 = u - 1.0
            val1 = _dg(val0 + (t / a) + 1.0)
            val2 = _tg((a + t + (a * val0)) / a)
            val3 = _tg((t / a) + 1.0)
            val4 = _dg((t / a) + 1.0)
            val5 = a * a
            d1 = (val3 - val2) / val5
            d5 = (((a * val1) + (t * val2)) - (a * val4) - (t * val3)) / (val5 * a)
            d3 = (((((val5 * val0) - (t * t * val2)) + (t * t * val3)) - (2.0 * a * t * val1))
                  + (2.0 * a * t * val4)) / (val5 * val5)
            o1 = (val1 - val4) / a
            o3 = ((-t * val1) + (a * val0) + (t * val4)) / (a * a)
            o2 = _dg(n + t) - _dg(t + 1.0)
            d2 = _tg(t + 1.0) - _tg(n + t)
            val6 = _dg(1.0 - a)
            val7 = _tg(1.0 - a)
            if so.size <= 32:   # plain Python is faster than numpy for a few entries
                d4 = sum(float(ci) * (val7 - _tg(float(si) - a)) for si, ci in zip(so, co))
                o4 = sum(float(ci) * (_dg(float(si) - a) - val6) for si, ci in zip(so, co))
            else:
                d4 = float((co * (val7 - arx_trigamma(so - a))).sum())
                o4 = float((co * (arx_digamma(so - a) - val6)).sum())
            return o1 - o2, o3 - o4, d2 - d1, -d5, -d5, -d3 - d4
    return f


def _pitman_iterative(s: np.ndarray, c: np.ndarray, u: float, n: float):
    """``getMasterFunctionIterative``: the same equations with the sums over ``i < u`` written
    out (numpy sums), where ARX's closed form divides digamma differences by alpha and loses
    digits for a small alpha. The sums over ``j < key`` and ``i < n``, which ARX also loops
    over, are digamma / trigamma differences with scipy's exact functions: they are not
    divided by alpha, so they lose nothing against the loops, and an evaluation costs
    O(classes), not O(records + largest class)."""
    i = np.arange(1, int(math.ceil(u)), dtype=np.float64)
    other = s != 1
    keys, vals = s[other].astype(np.float64), c[other].astype(np.float64)

    def f(t: float, a: float):
        with np.errstate(all="ignore"):
            v1 = 1.0 / (t + i * a)
            v3 = v1 * v1
            d1, d5, d3 = v3.sum(), (i * v3).sum(), (i * i * v3).sum()
            o1, o3 = v1.sum(), (i * v1).sum()
            # sum_{0<j<k} 1/(j-a) and 1/(j-a)^2, and sum_{0<i<n} 1/(t+i) and 1/(t+i)^2, as
            # digamma / trigamma differences (scipy's exact functions: ~1e-15 absolute, far
            # below the solver's 1e-6; unlike the sums over i < u they are not divided by alpha)
            d4 = float((vals * (special.polygamma(1, 1.0 - a) - special.polygamma(1, keys - a))).sum())
            o4 = float((vals * (special.digamma(keys - a) - special.digamma(1.0 - a))).sum())
            o2 = float(special.digamma(t + n) - special.digamma(t + 1.0))
            d2 = float(special.polygamma(1, t + 1.0) - special.polygamma(1, t + n))
            return o1 - o2, o3 - o4, d2 - d1, -d5, -d5, -d3 - d4
    return f


def _pitman_result(t: float, a: float, p: float) -> float:
    """``ModelPitman.getResult``: ``Gamma(t + 1) / Gamma(t + a) * p^a``, through log-gamma
    and through gamma, each kept only within [0, p]; the larger, NaN if neither."""
    if math.isnan(a) or math.isnan(t) or a == 0:
        return math.nan
    with np.errstate(all="ignore"):
        # commons-math's logGamma is NaN for arguments <= 0
        lg = lambda v: float(special.gammaln(v)) if v > 0 else math.nan  # noqa: E731
        val1 = float(np.exp(np.float64(lg(t + 1.0) - lg(t + a))) * np.power(np.float64(p), a))
        val1 = val1 if 0.0 <= val1 <= p else math.nan
        val2 = float(np.float64(special.gamma(t + 1.0)) / np.float64(special.gamma(t + a)) * np.power(np.float64(p), a))
        val2 = val2 if 0.0 <= val2 <= p else math.nan
    if math.isnan(val1) and math.isnan(val2):
        return math.nan
    if not math.isnan(val1) and not math.isnan(val2):
        return max(val1, val2)
    return val2 if math.isnan(val1) else val1


def pitman(sizes: Any, counts: Any, population_size: float) -> tuple[float, str]:
    """Pitman's model (Hoshino 2001) as ``ModelPitman``: ``(raw estimate, solver)``.

    The maximum-likelihood ``theta, alpha`` solve ``sum_{i<u} 1/(theta + i alpha) =
    sum_{i<n} 1/(theta + i)`` and ``sum_{i<u} i/(theta + i alpha) = sum_k c_k sum_{j<k}
    1/(j - alpha)``, by Newton-Raphson from ARX's initial guess (with ``c_2`` taken as 1 when
    there is no class of size 2)::

        c = c_1 (c_1 - 1) / c_2
        theta0 = (n u c - c_1 (n - 1)(2u + c)) / (2 c_1 u + c_1 c - n c)
        alpha0 = (theta0 (c_1 - n) + (n - 1) c_1) / (n u)

    under the constraint ``theta >= 0``; first in closed form (digamma), and if that fails or
    its root does not satisfy the explicit-sum equations within 1e-6, again with the explicit
    sums. Uniques ``= Gamma(theta + 1) / Gamma(theta + alpha) * N^alpha``. ``solver`` is
    ``"closed-form"``, ``"iterative"`` or ``"failed"``."""
    s, c = _hist(sizes, counts)
    c1 = float(_count_of_size(s, c, 1))
    c2 = float(_count_of_size(s, c, 2))
    u = float(c.sum())
    n = float((s * c).sum())
    p = float(population_size)
    if n == 0:
        return math.nan, "failed"
    with np.errstate(all="ignore"):
        c2 = c2 if c2 != 0 else 1.0
        cc = (c1 * (c1 - 1)) / c2
        den = ((2 * c1 * u) + (c1 * cc)) - (n * cc)
        t0 = float(np.float64((n * u * cc) - (c1 * (n - 1) * ((2 * u) + cc))) / np.float64(den))
        a0 = float(np.float64((t0 * (c1 - n)) + ((n - 1) * c1)) / np.float64(n * u))
    constraint = lambda t, a: t >= 0  # noqa: E731
    result = newton_raphson_2d(_pitman_closed(s, c, u, n), (t0, a0), constraint)
    solver = "closed-form"
    iterative = _pitman_iterative(s, c, u, n)
    if math.isnan(result.x) or math.isnan(result.y):
        result = newton_raphson_2d(iterative, (t0, a0), constraint)
        solver = "iterative"
    else:
        tx, ty = iterative(result.x, result.y)[:2]
        if math.isnan(tx) or math.isnan(ty) or abs(tx) > ACCURACY or abs(ty) > ACCURACY:
            result = newton_raphson_2d(iterative, (t0, a0), constraint)
            solver = "iterative"
    estimate = _pitman_result(result.x, result.y, p)
    return estimate, (solver if not math.isnan(result.x) else "failed")


# -- SNB (ModelSNB) -------------------------------------------------------------------------------

def _snb_classes(s: np.ndarray, c: np.ndarray, u: float, c1: float, f: float) -> float:
    """``estimateNonEmptyEquivalenceClasses``: Shlosser's estimate of the number of non-empty
    classes in the population, as ARX writes it (note its ``- 1`` per histogram entry)::

        K = u + c_1 * (A / B) * (C / D)^2,   A = sum k f^2 (1 - f^2)^(k-1) c_k,
        B = sum ((1 - f)^k c_k (1 + f)^k - 1),  C = sum (1 - f)^k c_k,  D = sum k f (1 - f)^(k-1) c_k"""
    k = s.astype(np.float64)
    cc = c.astype(np.float64)
    var5 = f * f
    with np.errstate(all="ignore"):
        val2 = np.power(1 - f, k) * cc
        var1 = float((k * var5 * np.power(1 - var5, k - 1) * cc).sum())
        var2 = float((val2 * np.power(1 + f, k) - 1).sum())
        var3 = float(val2.sum())
        var4 = float((k * f * np.power(1 - f, k - 1) * cc).sum())
        return float(np.float64(u) + np.float64(c1) * (np.float64(var1) / var2) * (np.float64(var3) / var4)
                     * (np.float64(var3) / var4))


def _snb_function(k: float, f: float, c1: float, c2: float):
    """``ModelSNB.getObjectFunction`` and ``getDerivatives``, verbatim (alpha = x, beta = y)."""
    def fn(a: float, b: float):
        with np.errstate(all="ignore"):
            a, b = np.float64(a), np.float64(b)
            dividend = (1 - f) * (1 - b)
            o1 = k * f * np.power(b / (1 - dividend), a) * (((a * dividend) / (1 - dividend)) + 1) - c1
            o2 = (k * a * np.power(b, a) * (f * f) * (1 - b) / 2 * np.power(1 - dividend, a + 2)
                  * (2 - (1 - a) * dividend) - c2)
            val0 = (b - 1.0) * (f - 1.0)
            val1 = val0 - 1.0
            val2 = 1.0 - val0
            val3 = a * val0 / val1 - 1.0
            val4 = np.power(-b / val1, a)
            val6 = np.power(f, 2.0)
            val7 = np.power(b, a)
            val8 = val7 * val6 * k
            val9 = a * val8
            val10 = 2.0 * np.power(val2, a + 2.0)
            val11 = np.power(val1, 2.0)
            val13 = f * k
            val14 = f - 1.0
            val15 = a - 1.0
            val16 = b - 1.0
            val17 = val15 * val0
            val18 = val6 * k
            val19 = val17 + 2.0
            val20 = val18 * val19
            x1 = -val13 * np.log(-b / val1) * val3 * val4 - (val13 * val4 * val0) / val1
            x2 = (a * val13 * (1.0 / val1 - (b * val14) / val11) * val3 * np.power(-b / val1, val15)
                  - val13 * val4 * ((a * val14) / val1 - (a * val16 * np.power(val14, 2.0)) / val11))
            y1 = ((val9 * np.log(val2) * val19 * val16) / val10 - (val9 * np.power(val16, 2.0) * val14) / val10
                  - (val7 * val20 * val16) / val10 - (a * val7 * val18 * np.log(b) * val19 * val16) / val10)
            y2 = (-(val9 * val19) / val10 - (np.power(a, 2.0) * np.power(b, val15) * val20 * val16) / val10
                  - (a * val7 * val18 * val17) / val10
                  - (a * val7 * val20 * (a + 2.0) * val0) / (2.0 * np.power(val2, a + 3.0)))
            return o1, o2, x1, x2, y1, y2
    return fn


def snb(sizes: Any, counts: Any, population_size: float) -> float:
    """The SNB model (Chen 1998) as ``ModelSNB``: ``K`` from :func:`_snb_classes`, then
    ``alpha, beta`` solving ARX's two equations (in ``c_1`` and ``c_2``) by Newton-Raphson
    from (1, 1); uniques ``= K * beta^alpha`` (raw: NaN when the solver fails)."""
    s, c = _hist(sizes, counts)
    n = float((s * c).sum())
    if n == 0:
        return math.nan
    u = float(c.sum())
    c1 = float(_count_of_size(s, c, 1))
    c2 = float(_count_of_size(s, c, 2))
    f = n / float(population_size)
    k = _snb_classes(s, c, u, c1, f)
    r = newton_raphson_2d(_snb_function(k, f, c1, c2), (1.0, 1.0))
    with np.errstate(all="ignore"):
        return float(np.float64(k) * np.power(np.float64(r.y), np.float64(r.x)))


# -- Dankar's decision rule (RiskModelPopulationUniqueness) ---------------------------------------

MODELS = ("pitman", "zayatz", "snb", "dankar")
#: the numbers ``population-uniqueness.dankar_model`` reports
MODEL_CODES = {"none": 0.0, "pitman": 1.0, "zayatz": 2.0, "snb": 3.0}


def _valid(v: float) -> bool:
    return not math.isnan(v) and v != 0.0


@dataclass
class PopulationUniqueness:
    """Estimated numbers of population uniques (ARX's ``getNumUniqueTuples*``: 0 when not
    available), the model Dankar's rule chose (``"none"`` when the sample has no unique,
    ARX's ``DANKAR``), the population size and sampling fraction, and the raw estimates."""

    population_size: float
    sampling_fraction: float
    sample_uniques: int
    pitman: float
    zayatz: float
    snb: float
    dankar: float
    dankar_model: str
    pitman_solver: str = ""
    raw: dict[str, float] = field(default_factory=dict)

    def uniques(self, model: str) -> float:
        return {"pitman": self.pitman, "zayatz": self.zayatz, "snb": self.snb, "dankar": self.dankar}[model]

    def fraction(self, model: str) -> float:
        """``getFractionOfUniqueTuples*``: uniques / population size."""
        return self.uniques(model) / self.population_size if self.population_size else 0.0

    def available(self, model: str) -> bool:
        """``isAvailableEstimate*``: an estimate other than 0, or no sample unique at all."""
        return self.uniques(model) != 0.0 or self.sample_uniques == 0


def population_uniqueness(sizes: Any, counts: Any = None, population_size: float = USA_POPULATION,
                          models: tuple[str, ...] = ("pitman", "zayatz", "snb")) -> PopulationUniqueness:
    """Every estimate over the frequency of frequencies (``counts=None``: ``sizes`` are class
    sizes), and Dankar et al.'s decision rule as ``RiskModelPopulationUniqueness``:

    - no sample unique: every estimate 0, model ``"none"``;
    - sampling fraction ``n / N <= 0.1``: Pitman if available, else Zayatz;
    - above: Zayatz if SNB is not available or Zayatz < SNB, else SNB.

    ``models`` limits which estimates are computed beyond what the rule needs."""
    s, c = _hist(sizes, counts) if counts is not None else class_size_histogram(sizes)
    n = float((s * c).sum())
    N = float(population_size)
    if n > 0 and N < n:
        raise InputError(f"the population ({population_size:,}) is smaller than the table ({int(n):,} records)")
    f = n / N if N else 0.0
    c1 = _count_of_size(s, c, 1)
    if c1 == 0:
        return PopulationUniqueness(N, f, 0, 0.0, 0.0, 0.0, 0.0, "none", "")
    raw: dict[str, float] = {}
    solver = ""
    need = set(models) | ({"pitman", "zayatz"} if f <= 0.1 else {"snb", "zayatz"})
    if "zayatz" in need:
        raw["zayatz"] = zayatz(s, c, N)
    if "snb" in need:
        raw["snb"] = snb(s, c, N)
    if "pitman" in need:
        raw["pitman"], solver = pitman(s, c, N)
    get = lambda m: raw[m] if m in raw and _valid(raw[m]) else 0.0  # noqa: E731
    if f <= 0.1:
        if _valid(raw["pitman"]):
            dankar, model = raw["pitman"], "pitman"
        else:
            dankar, model = raw["zayatz"], "zayatz"
    elif _valid(raw["snb"]):
        dankar, model = (raw["zayatz"], "zayatz") if raw["zayatz"] < raw["snb"] else (raw["snb"], "snb")
    else:
        dankar, model = raw["zayatz"], "zayatz"
    return PopulationUniqueness(N, f, c1, get("pitman"), get("zayatz"), get("snb"),
                                dankar if _valid(dankar) else 0.0, model, solver, raw)
