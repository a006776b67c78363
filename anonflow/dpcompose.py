"""Composing the privacy losses charged to one source, with OpenDP's combinators.

Imported only where a differentially private step or a charged ledger exists (OpenDP takes
a second to load): :mod:`anonflow.runner.privacy_budget` and ``anonflow budget`` defer it.

Each charge (:class:`anonflow.privacyloss.Charge`) becomes an OpenDP measurement whose privacy
map returns the charge's figures (``make_user_measurement``: the plugin vouches for its loss, as
the honest-but-curious feature says, enabled only while composing), and the measurements are
composed by OpenDP:

* **basic**: every charge as approximate DP, (ε, δ) summed (``make_composition`` over
  ``approximate(max_divergence())``); a pure loss ε is (ε, 0);
* **zcdp**: the pure losses converted to ρ = ε²/2 (``make_pureDP_to_zCDP``) and summed with
  the zCDP ones (``make_composition`` over ``zero_concentrated_divergence()``).

In both, the summed ρ (if any) is converted to (ε, δ) by OpenDP (``make_zCDP_to_approxDP``, its
privacy profile's ``epsilon(δ)``) at the δ the budget leaves once the approximate losses' δ
are counted, and composed with the approximate losses by basic composition. Both bounds are
valid; :func:`compose` returns the tighter (smaller ε; basic on a tie) and says which.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterable, Iterator

import opendp.prelude as dp

from .privacyloss import Charge

#: the compositions :func:`compose` may choose
COMPOSITIONS = ("basic", "zcdp")


@contextlib.contextmanager
def _features() -> Iterator[None]:
    """OpenDP's ``contrib`` and ``honest-but-curious`` features for the block only (those
    already enabled stay)."""
    before = set(dp.c.GLOBAL_FEATURES)
    dp.enable_features("contrib", "honest-but-curious")
    try:
        yield
    finally:
        added = {"contrib", "honest-but-curious"} - before
        if added:
            dp.disable_features(*sorted(added))


def _stated(measure: Any, loss: Any) -> Any:
    """A measurement whose privacy map states ``loss`` whatever the input distance (one record
    changed: the unit every declared loss is stated in)."""
    return dp.m.make_user_measurement(dp.atom_domain(T=bool), dp.discrete_distance(), measure, lambda x: x,
                                      lambda d_in: loss)


def _approximate(parts: list[tuple[float, float]]) -> tuple[float, float]:
    """Basic composition of (ε, δ) pairs."""
    if not parts:
        return 0.0, 0.0
    if any(math.isinf(e) for e, _ in parts):  # a zCDP loss no δ left covers
        return math.inf, sum(d for _, d in parts)
    measure = dp.approximate(dp.max_divergence())
    eps, delta = dp.c.make_composition([_stated(measure, (float(e), float(d))) for e, d in parts]).map(1)
    return float(eps), float(delta)


def _zcdp(rhos: list[float], pure: list[float]) -> float:
    """zCDP composition: the ρ's, with each pure ε as ρ = ε²/2."""
    zc = dp.zero_concentrated_divergence()
    parts = [_stated(zc, float(r)) for r in rhos]
    parts += [dp.c.make_pureDP_to_zCDP(_stated(dp.max_divergence(), float(e))) for e in pure]
    if not parts:
        return 0.0
    return float(dp.c.make_composition(parts).map(1))


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The ε of ρ-zCDP at δ, by OpenDP's conversion (``make_zCDP_to_approxDP``); inf where δ
    is 0 or out of reach."""
    with _features():
        return _zcdp_epsilon(rho, delta)


def _zcdp_epsilon(rho: float, delta: float) -> float:
    if rho <= 0:
        return 0.0
    if delta <= 0:
        return math.inf
    profile = dp.c.make_zCDP_to_approxDP(_stated(dp.zero_concentrated_divergence(), float(rho))).map(1)
    try:
        return float(profile.epsilon(float(delta)))
    except dp.OpenDPException:
        return math.inf


def compose(charges: Iterable[Charge], delta: float | None) -> dict[str, Any]:
    """The (ε, δ) the ``charges`` to one source add up to, at most ``delta`` (the budget's δ;
    None when no budget is declared: zCDP losses are then left as ρ and ε is None when there
    are any). Returns ``{"epsilon", "delta", "composition", "pure", "approximate", "rho"}``:
    the tighter bound of :data:`COMPOSITIONS` and which one it is, and the sums of each
    measure as charged (pure ε, approximate (ε, δ), zCDP ρ)."""
    charges = list(charges)
    pure = [c.epsilon for c in charges if c.measure == "pure" or (c.measure == "approximate" and not c.delta)]
    approx = [(c.epsilon, c.delta) for c in charges if c.measure == "approximate" and c.delta]
    rhos = [c.rho for c in charges if c.measure == "zcdp"]
    with _features():
        sums = {"pure": _approximate([(e, 0.0) for e in pure])[0] if pure else 0.0,
                "approximate": list(_approximate(approx)),
                "rho": _zcdp(rhos, [])}
        left = None if delta is None else delta - sums["approximate"][1]
        options: list[tuple[str, float, float]] = []
        for method in COMPOSITIONS:
            rho = _zcdp(rhos, pure if method == "zcdp" else [])
            parts = approx + ([] if method == "zcdp" else [(e, 0.0) for e in pure])
            if rho > 0:
                if left is None:
                    continue
                parts.append((_zcdp_epsilon(rho, left), left) if left > 0 else (math.inf, 0.0))
            eps, dlt = _approximate(parts)
            options.append((method, eps, dlt))
    if not options:
        return {"epsilon": None, "delta": None, "composition": None, **sums}
    # on a tie, name the composition the charges were made in (zCDP when some are)
    method, eps, dlt = min(options, key=lambda o: (o[1], (o[0] == "zcdp") != bool(rhos)))
    return {"epsilon": eps, "delta": dlt, "composition": method, **sums}
