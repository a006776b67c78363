"""SafePub's parameters (Bild, Kuhn, Prasser, PETS 2018): the sampling probability beta and
the class size k that (epsilon, delta)-differential privacy needs, computed exactly as ARX
computes them (``org.deidentifier.arx.dp.ParameterCalculation`` with the interval
arithmetic of ``org.deidentifier.arx.reliability.IntervalArithmeticDouble``), so that a given
(epsilon, delta) gives ARX's beta and k to the last digit.

Every operation works on an interval [lower, upper] of doubles: the operation is applied to
the bounds, and the result widened by one floating-point step on each side (``nextafter``),
which makes it contain the exact value. beta is the lower bound of 1 - exp(-epsilon); k is
the smallest class size whose delta bound lies below the requested delta, found as ARX's
loop finds it (its returned k is one above the first k whose bound is below delta: the loop
increments k once more before it tests).

The split of the budget between the search and the anonymization also follows ARX:
``epsilon_anon = lower(epsilon - epsilon_search)`` and ``epsilon per step =
lower(epsilon_search / steps)``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Mapping

from anonflow.api import InputError

_INF = math.inf
_MAX = 1.7976931348623157e308  # Double.MAX_VALUE
_PI = (3.1415926535897932384, 3.1415926535897932385)

Interval = tuple[float, float]


class IntervalError(ArithmeticError):
    """ARX's IntervalArithmeticException: a bound that is not a finite number, or a
    comparison that the intervals cannot decide."""


def _down(v: float) -> float:
    return math.nextafter(v, -_INF)


def _up(v: float) -> float:
    return math.nextafter(v, _INF)


def _check(*values: float) -> None:
    for v in values:
        if math.isnan(v) or math.isinf(v):
            raise IntervalError(f"numeric instability: {v}")


def _point(v: float) -> Interval:
    _check(v)
    return (float(v), float(v))


def _fast(a: Interval, b: Interval, v0: float, v1: float, v2: float, v3: float) -> Interval:
    lo = _down(min(v0, v1, v2, v3))
    hi = _up(max(v0, v1, v2, v3))
    if not (-_INF < lo and hi < _INF):  # also catches nan
        _check(v0, v1, v2, v3, lo, hi)
    return (lo, hi)


def _un(a: Interval, op, expand: bool = True) -> Interval:
    v0, v1 = op(a[0]), op(a[1])
    _check(v0, v1)
    lo, hi = min(v0, v1), max(v0, v1)
    if expand:
        lo, hi = _down(lo), _up(hi)
    _check(lo, hi)
    return (lo, hi)


def add(a: Interval, b: Interval) -> Interval:
    return _fast(a, b, a[0] + b[0], a[0] + b[1], a[1] + b[0], a[1] + b[1])


def sub(a: Interval, b: Interval) -> Interval:
    return _fast(a, b, a[0] - b[0], a[0] - b[1], a[1] - b[0], a[1] - b[1])


def mult(a: Interval, b: Interval) -> Interval:
    return _fast(a, b, a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])


def div(a: Interval, b: Interval) -> Interval:
    return _fast(a, b, a[0] / b[0], a[0] / b[1], a[1] / b[0], a[1] / b[1])


def exp(a: Interval) -> Interval:
    return _un(a, math.exp)


def log(a: Interval) -> Interval:
    return _un(a, math.log)


def sqrt(a: Interval) -> Interval:
    return _un(a, math.sqrt)


def inv(a: Interval) -> Interval:
    return _un(a, lambda x: 1.0 / x)


def pow_(a: Interval, e: int) -> Interval:
    return _un(a, lambda x: math.pow(x, e))


ZERO, ONE, MINUS_ONE = _point(0.0), _point(1.0), _point(-1.0)


def _overlap_error(a: Interval, b: Interval) -> None:
    if not (a[1] < b[0] or b[1] < a[0]):
        raise IntervalError("undecidable relationship")


def less_than(a: Interval, b: Interval) -> bool:
    _overlap_error(a, b)
    return a[1] < b[0]


def greater_than(a: Interval, b: Interval) -> bool:
    _overlap_error(a, b)
    return a[0] > b[1]


def less_than_or_overlap(a: Interval, b: Interval) -> bool:
    return a[0] <= b[1]


def maximum(a: Interval, b: Interval) -> Interval:
    if a[1] == b[0]:
        return b
    if b[1] == a[0]:
        return a
    _overlap_error(a, b)
    return b if a[1] < b[0] else a


def _stirling_error(v: Interval) -> Interval:
    base = sub(inv(mult(_point(12.0), v)), inv(mult(_point(360.0), pow_(v, 3))))
    bound = inv(mult(_point(1260.0), pow_(v, 5)))
    offset = max(abs(bound[0]), abs(bound[1]))
    lo, hi = _down(base[0] - offset), _up(base[1] + offset)
    _check(lo, hi)
    if lo > hi:
        raise IntervalError("invalid range")
    return (lo, hi)


@lru_cache(maxsize=None)
def _stirling_of(i: int) -> Interval:
    return _stirling_error(_point(float(i)))


@lru_cache(maxsize=None)
def _stirling_of_difference(n: int, k: int) -> Interval:
    return _stirling_error(sub(_point(float(n)), _point(float(k))))


def binomial_probability(n: int, p: Interval, k: int) -> Interval:
    """ARX's interval binomial probability (Loader's saddle-point form, as in commons-math)."""
    if less_than(p, ZERO) or greater_than(p, ONE):
        raise IntervalError(f"invalid p: {p}")
    if k < 0 or k > n:
        return ZERO
    if k == 0:
        return pow_(sub(ONE, p), n)
    if k == n:
        return pow_(p, n)
    n_, k_ = _point(float(n)), _point(float(k))
    nk = sub(n_, k_)
    dev = add(mult(k_, log(div(k_, mult(n_, p)))), mult(nk, log(div(nk, mult(n_, sub(ONE, p))))))
    # the Stirling errors depend on the integers alone (cached): the same intervals as ARX's
    term1 = sub(sub(_stirling_of(n), _stirling_of(k)), _stirling_of_difference(n, k))
    term2 = sqrt(div(n_, mult(mult(mult(_point(2.0), _PI), k_), nk)))
    return exp(sub(add(log(term2), term1), dev))


def _beta(epsilon: Interval) -> Interval:
    return sub(ONE, exp(mult(MINUS_ONE, epsilon)))


def _gamma(epsilon: Interval, beta: Interval) -> Interval:
    power = exp(epsilon)
    return div(add(sub(power, ONE), beta), power)


#: the most binomial terms the derivation of k may add up (about 38 µs each here: some 10 s).
#: ε = 3 with δ = 10⁻⁶ needs about 105,000 (k = 241); ε = 5 does not finish in 30 s. ARX's
#: Java is faster but walks the same ever longer sums; beyond this the model is refused.
MAX_TERMS = 250_000


class TooLarge(ArithmeticError):
    """The derivation of k would add up more than :data:`MAX_TERMS` binomial terms."""


def _a(n: int, beta: Interval, gamma: Interval, work: list[int] | None = None) -> Interval:
    start = math.floor(mult(_point(float(n)), gamma)[0]) + 1
    if work is not None:
        work[0] += max(n + 1 - start, 0)
        if work[0] > MAX_TERMS:
            raise TooLarge(f"more than {MAX_TERMS} binomial terms")
    total = ZERO
    for j in range(start, n + 1):
        total = add(total, binomial_probability(n, beta, j))
    return total


def _c(n: int, beta: Interval, gamma: Interval) -> Interval:
    term1 = mult(gamma, log(div(gamma, beta)))
    term2 = sub(term1, sub(gamma, beta))
    return exp(mult(MINUS_ONE, mult(_point(float(n)), term2)))


def _delta_k(k: int, beta: Interval, gamma: Interval, cache: dict[int, tuple[Interval, Interval]],
             work: list[int] | None = None) -> Interval:
    n_m = math.ceil(sub(div(_point(float(k)), gamma), ONE)[0])
    delta: Interval = (-_MAX, -_MAX)
    bound: Interval = (_MAX, _MAX)
    n = n_m
    while less_than_or_overlap(delta, bound):
        if n not in cache:
            cache[n] = (_a(n, beta, gamma, work), _c(n, beta, gamma))
        a, c = cache[n]
        delta = maximum(delta, a)
        bound = c
        n += 1
    return delta


@lru_cache(maxsize=256)
def safepub_parameters(epsilon: float, delta: float) -> tuple[float, int]:
    """(beta, k) for an anonymization budget ``epsilon`` and ``delta``, as ARX's
    ``ParameterCalculation(epsilon, delta)`` gives them."""
    eps, dlt = _point(float(epsilon)), _point(float(delta))
    cache: dict[int, tuple[Interval, Interval]] = {}
    work = [0]
    k = 1
    delta_k: Interval = (_MAX, _MAX)
    try:
        beta = _beta(eps)
        gamma = _gamma(eps, beta)
        while not less_than(delta_k, dlt):
            delta_k = _delta_k(k, beta, gamma, cache, work)
            k += 1
    except (TooLarge, IntervalError) as exc:
        raise InputError(f"ed-differential-privacy: k cannot be derived for the anonymization's ε = {float(epsilon):g} "
                         f"with δ = {float(delta):g} ({exc}); SafePub is meant for ε up to about 3 (k = 241 at ε = "
                         "3, δ = 1e-06): choose a smaller ε or a larger δ") from None
    return beta[0], k


def split_budget(epsilon: float, search_share: float, steps: int) -> tuple[float, float, float]:
    """(epsilon_anonymization, epsilon_search, epsilon per search step) as ARX splits the
    budget: the search gets ``epsilon * search_share`` (ARX's GUI: the fraction of epsilon
    for the generalization, default 0.1), the anonymization the interval lower bound of the
    rest, and each of the ``steps`` the lower bound of the search's share over the steps.
    ``search_share`` 0 (a fixed generalization): the anonymization gets all of epsilon."""
    if search_share <= 0:
        return float(epsilon), 0.0, 0.0
    search = float(epsilon) * float(search_share)
    anon = sub(_point(float(epsilon)), _point(search))[0]
    per_step = div(_point(search), _point(float(steps)))[0] if steps > 0 else 0.0
    return anon, search, per_step


#: ARX's GUI default: the search gets 10 % of epsilon
SEARCH_SHARE = 0.1
#: ARX's GUI default step limit, 1000 checks, which ARX turns into 1000 // |QI| expansions
CHECKS = 1000


def dp_settings(mparams: Mapping[str, Any], n_quasi: int | None = None) -> dict[str, Any]:
    """The model's parameters checked and the figures they imply: epsilon, delta, the
    search share and steps (None until the number of QIs is known), the anonymization's and
    the search's epsilon, epsilon per step, beta and k."""
    eps, delta = mparams.get("epsilon"), mparams.get("delta")
    if eps is None or not float(eps) > 0:
        raise InputError(f"ed-differential-privacy: epsilon must be > 0 (got {eps!r})")
    if delta is None or not 0 < float(delta) < 1:
        raise InputError(f"ed-differential-privacy: delta must be in (0, 1) (got {delta!r})")
    fixed = mparams.get("generalization")
    share = 0.0 if fixed else float(SEARCH_SHARE if mparams.get("search_share") is None else mparams["search_share"])
    if not fixed and not 0 < share < 1:
        raise InputError(f"ed-differential-privacy: search_share must be in (0, 1) (got {share!r})")
    steps = mparams.get("steps")
    if steps is None and n_quasi:
        steps = max(CHECKS // n_quasi, 1)
    if steps is not None and int(steps) < 1:
        raise InputError(f"ed-differential-privacy: steps must be >= 1 (got {steps!r})")
    anon, search, per_step = split_budget(float(eps), share, int(steps or 1))
    beta, k = safepub_parameters(anon, float(delta))
    return {"epsilon": float(eps), "delta": float(delta), "search_share": share,
            "steps": None if fixed else (None if steps is None else int(steps)),
            "epsilon_anonymization": anon, "epsilon_search": search,
            "epsilon_per_step": per_step if steps is not None else None,
            "beta": beta, "k": int(k), "generalization": dict(fixed) if fixed else None}


def privacy_loss_of(s: Mapping[str, Any]) -> dict[str, Any]:
    """What a SafePub step spends, for :meth:`anonflow.api.Plugin.privacy_loss`: (epsilon,
    delta) in the ``approximate`` measure, with beta, k, the search's share and steps."""
    return {"measure": "approximate", "epsilon": s["epsilon"], "delta": s["delta"], "beta": s["beta"],
            "k": s["k"], "search_share": s["search_share"], "steps": s["steps"]}
