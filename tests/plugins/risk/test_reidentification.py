"""ARX's re-identification risk models (plugins/anonflow_std/risk/reidentification.py).

The figures marked "ARX" were printed by ARX's own classes (arx-deidentifier/arx at commit
aacd487f: risk/Gamma, ModelPitman, ModelZayatz, ModelSNB, RiskModelPopulationUniqueness with
ARXSolverConfiguration.create()), compiled against the jars ARX ships (commons-math3 3.6.1,
hppc 0.6.0, newtonraphson 0.0.1) and fed a RiskModelHistogram built from the same
frequency-of-frequencies.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, special

from anonflow.api import InputError, RunError
from anonflow.testing import make_context, typed_table

from anonflow_std.common import uniqueness as U
from anonflow_std.risk import reidentification as R

# class sizes 1, 2, 2, 5: n = 10 records, u = 4 classes
SIZES = [1, 2, 2, 5]


# -- prosecutor / journalist / marketer ------------------------------------------------------

def test_prosecutor_by_hand():
    r = U.prosecutor_risk(SIZES, threshold=0.2)
    assert r.highest == 1.0                 # 1 / smallest class (1)
    assert r.lowest == 0.2                  # 1 / largest class (5)
    assert r.success_rate == 0.4            # classes / records = 4 / 10
    assert r.average == 0.4
    # risks 1, 1/2, 1/2, 1/5: 1/5 = 0.2 is NOT > 0.2 (ARX: strictly greater), so 1 + 2 + 2 of 10
    assert r.records_at_risk == 0.5
    assert U.prosecutor_risk(SIZES, threshold=0.5).records_at_risk == 0.1   # 1/2 > 0.5 fails: 1 of 10
    assert U.prosecutor_risk(SIZES, threshold=0.19).records_at_risk == 1.0  # every record
    assert U.prosecutor_risk(SIZES, threshold=1.0).records_at_risk == 0.0   # 1 > 1 fails too


def test_prosecutor_from_histogram_equals_class_sizes():
    s, c = U.class_size_histogram(SIZES)
    assert s.tolist() == [1, 2, 5] and c.tolist() == [1, 2, 1]
    assert U.prosecutor_risk(s, c, 0.2) == U.prosecutor_risk(SIZES, None, 0.2)


def test_journalist_and_marketer_by_hand():
    f, F = [1, 2, 2, 5], [3, 2, 10, 5]      # each sample class's size in the population
    j = U.journalist_risk(f, F, threshold=0.2)
    assert j.highest == 0.5                 # 1 / min F
    assert j.lowest == 0.1                  # 1 / max F
    # 1/3 > .2 (1 record), 1/2 > .2 (2), 1/10 and 1/5 not: 3 of 10
    assert j.records_at_risk == pytest.approx(0.3)
    # max(classes / sum F = 4/20, sum(f/F)/n = (1/3 + 1 + 1/5 + 1)/10)
    assert j.success_rate == pytest.approx((1 / 3 + 1 + 0.2 + 1) / 10)
    assert U.marketer_risk(f, F) == pytest.approx((1 / 3 + 1 + 0.2 + 1) / 10)
    # rC1 wins when the population classes are small relative to the sample's
    j2 = U.journalist_risk([2, 2], [2, 100], threshold=0.2)
    assert j2.success_rate == pytest.approx(max(2 / 102, (1 + 0.02) / 4))


def test_journalist_without_population_is_prosecutor_and_marketer_is_classes_over_records():
    assert U.journalist_risk(SIZES, None, threshold=0.2) == U.prosecutor_risk(SIZES, threshold=0.2)
    assert U.marketer_risk(SIZES) == 0.4
    # with (f, F) pairs weighted by counts
    assert U.marketer_risk([1, 2], [3, 2], counts=[2, 1]) == pytest.approx((2 * 1 / 3 + 1) / 4)


def test_sample_uniqueness_by_hand():
    assert U.sample_uniqueness(SIZES) == (1, 0.1)
    assert U.sample_uniqueness([1, 1, 1]) == (3, 1.0)
    assert U.sample_uniqueness([4]) == (0, 0.0)


def test_edge_cases():
    empty = U.prosecutor_risk([], threshold=0.2)
    assert (empty.highest, empty.success_rate, empty.records_at_risk, empty.lowest) == (0, 0, 0, 0)
    assert U.marketer_risk([]) == 0.0 and U.sample_uniqueness([]) == (0, 0.0)
    uniq = U.prosecutor_risk([1] * 7)
    assert (uniq.highest, uniq.success_rate, uniq.records_at_risk, uniq.lowest) == (1, 1, 1, 1)
    one = U.prosecutor_risk([8])
    assert (one.highest, one.success_rate, one.records_at_risk, one.lowest) == (0.125, 0.125, 0.0, 0.125)
    pu = U.population_uniqueness([], [], 1000)
    assert (pu.pitman, pu.zayatz, pu.snb, pu.dankar, pu.dankar_model) == (0, 0, 0, 0, "none")


def test_monotone_under_merging_classes():
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 6, 200)
    before = U.prosecutor_risk(sizes, threshold=0.2)
    merged = np.add.reduceat(sizes, np.arange(0, 200, 2))   # generalize: pairs of classes merge
    after = U.prosecutor_risk(merged, threshold=0.2)
    assert after.highest <= before.highest and after.success_rate <= before.success_rate
    assert after.records_at_risk <= before.records_at_risk and after.lowest <= before.lowest
    assert U.sample_uniqueness(merged)[0] <= U.sample_uniqueness(sizes)[0]


# -- population uniqueness ---------------------------------------------------------------------

def test_population_size_for():
    assert U.population_size_for(100) == U.USA_POPULATION == 317_238_626
    assert U.population_size_for(100, population_size=5000) == 5000
    assert U.population_size_for(3, sampling_fraction=0.4) == 8      # Math.round(7.5) = 8 (halves up)
    assert U.population_size_for(10, sampling_fraction=0.1) == 100
    with pytest.raises(InputError):
        U.population_size_for(10, 100, 0.1)


def test_zayatz_by_hand():
    # classes of size 1 and 2 (n = 3, u = 2), population N = 10, f = 0.3
    # h_1 = P(X=1 | N=10, K=1, 3 draws) = 3/10; h_2 = C(2,1) C(8,2) / C(10,3) = 56/120
    # uniqueness = (1/2 * 3/10) / (1/2 * 3/10 + 1/2 * 56/120) = 9/23; uniques = 1 * 9/23 / 0.3 = 30/23
    assert U.zayatz([1, 2], [1, 1], 10) == pytest.approx(30 / 23, rel=1e-14)
    assert U.zayatz([1, 2], [1, 1], 10) == pytest.approx(1.3043478260869565, rel=1e-14)   # ARX


def test_hypergeometric_p1_against_scipy():
    from scipy import stats
    K = np.array([1, 2, 3, 7, 40])
    assert np.allclose(U._hypergeometric_p1(100_000, K, 3_000), stats.hypergeom.pmf(1, 100_000, K, 3_000), rtol=1e-10)


HIST = ([1, 2, 3, 4, 7, 20], [50, 30, 20, 10, 3, 1])     # n = 251 records, u = 114 classes

# population -> ARX's (pitman, zayatz, snb, dankar, model) for HIST, and two more
ARX = {
    ("HIST", 5000): (15.223150721164707, 228.01937292366605, 0.0, 15.223150721164707, "pitman"),
    ("HIST", 317_238_626): (0.005716111340509969, 12588666.401637195, 0.0, 0.005716111340509969, "pitman"),
    ("HIST", 600): (69.07071963366921, 52.42546971366605, 0.0, 52.42546971366605, "zayatz"),
    ("UNIQ", 317_238_626): (236.0130733426939, 317238626.0, 0.0, 236.0130733426939, "pitman"),
    ("SMALL", 317_238_626): (0.0, 33011307.663388487, 0.0, 33011307.663388487, "zayatz"),
    ("BIG", 3_000_000): (278369.1626029948, 362293.5824772538, 0.0, 362293.5824772538, "zayatz"),
}
HISTS = {"HIST": HIST, "UNIQ": ([1], [1]), "SMALL": ([1, 2, 3, 5], [10, 5, 2, 1]),
         "BIG": ([1, 2, 3, 4, 6, 10, 30], [200000, 100000, 50000, 20000, 5000, 1000, 100])}


@pytest.mark.parametrize("key", sorted(ARX))
def test_population_uniqueness_matches_arx(key):
    name, population = key
    pitman, zayatz, snb, dankar, model = ARX[key]
    pu = U.population_uniqueness(*HISTS[name], population)
    assert pu.pitman == pytest.approx(pitman, rel=1e-7, abs=1e-12)   # Newton stops within 1e-6 of the root
    assert pu.zayatz == pytest.approx(zayatz, rel=1e-12)
    assert pu.snb == snb
    assert pu.dankar == pytest.approx(dankar, rel=1e-7)
    assert pu.dankar_model == model
    assert pu.fraction("dankar") == pytest.approx(dankar / population, rel=1e-7)


def test_pitman_against_an_independent_solution():
    """Solve Pitman's likelihood equations (Hoshino 2001) with scipy from the explicit sums and
    compare the estimate Gamma(t+1)/Gamma(t+a) N^a."""
    s, c = np.array(HIST[0]), np.array(HIST[1])
    n, u, N = float((s * c).sum()), float(c.sum()), 5000.0
    i = np.arange(1, u)

    def eqs(v):
        t, a = v
        lhs1 = (1 / (t + i * a)).sum() - (1 / (t + np.arange(1, n))).sum()
        lhs2 = (i / (t + i * a)).sum() - sum(cc * (1 / (np.arange(1, k) - a)).sum() for k, cc in zip(s, c) if k != 1)
        return [lhs1, lhs2]

    t, a = optimize.fsolve(eqs, [10.0, 0.5], xtol=1e-13)
    expected = math.exp(special.gammaln(t + 1) - special.gammaln(t + a)) * N ** a
    estimate, solver = U.pitman(s, c, N)
    assert solver == "closed-form"
    # ARX stops once both equations are within 1e-6 of 0, not at the exact root: the estimate
    # agrees with the exact one to ~2e-7 here (and with ARX's own figure to 2e-11)
    assert estimate == pytest.approx(expected, rel=1e-6)


def test_dankar_rule():
    # f = 251 / 5000 <= 0.1: Pitman; f = 251 / 600 > 0.1 and SNB not available: Zayatz
    assert U.population_uniqueness(*HIST, 5000).dankar_model == "pitman"
    assert U.population_uniqueness(*HIST, 600).dankar_model == "zayatz"
    # Pitman not available (NaN) at f <= 0.1: Zayatz (ARX's useZayatzAsFallback)
    pu = U.population_uniqueness([1, 2, 3, 5], [10, 5, 2, 1], 317_238_626)
    assert pu.pitman == 0.0 and not pu.available("pitman") and pu.dankar_model == "zayatz"
    # no sample unique: everything 0, available, model "none" (ARX's DANKAR)
    pu = U.population_uniqueness([2, 3], [5, 1], 1000)
    assert (pu.dankar, pu.dankar_model, pu.available("pitman")) == (0.0, "none", True)
    with pytest.raises(InputError):
        U.population_uniqueness([1], [20], 10)     # population smaller than the sample


def test_snb_classes_by_hand_and_snb_unavailable_where_arx():
    s, c = np.array([1, 2]), np.array([1, 1])
    f = 0.3
    # K = u + c1 (A/B)(C/D)^2 with ARX's "- 1" per histogram entry in B
    A = 1 * f * f * 1 * 1 + 2 * f * f * (1 - f * f) * 1
    B = ((1 - f) * (1 + f) - 1) + ((1 - f) ** 2 * (1 + f) ** 2 - 1)
    C = (1 - f) + (1 - f) ** 2
    D = 1 * f * 1 + 2 * f * (1 - f)
    assert U._snb_classes(s, c, 2.0, 1.0, f) == pytest.approx(2 + 1 * (A / B) * (C / D) ** 2, rel=1e-14)
    assert math.isnan(U.snb(*HIST, 600))     # ARX's raw SNB is NaN here too


def test_arx_gamma_functions_match_arx():
    # x, ARX's Gamma.digamma(x), Gamma.trigamma(x) (note trigamma's missing tail below 12)
    rows = [(-2.5, 1.1031566406452427, 9.664084763908049), (-0.3, 2.1133097796353972, 14.07319078917415),
            (1e-7, -1.00000005772155e7, 1.0000000000000166e14), (5e-5, -20000.5771334212, 4.0000000164481384e8),
            (0.5, -1.9635100260214242, 4.809964081625754), (1.0, -0.5772156649015348, 1.511797052154195),
            (3.7, 1.1671535393615105, 0.18823699973141145), (8.0, 2.015641477955608, 0.0),
            (9.5, 2.1977378764029485, 0.0), (12.0, 2.44266167997581, 0.08690187287177067),
            (20.0, 2.970523992242149, 0.051270822935203124), (1e6, 13.81551005796419, 1.0000005000001667e-6)]
    x = np.array([r[0] for r in rows])
    assert np.allclose(U.arx_digamma(x), [r[1] for r in rows], rtol=1e-13)
    assert np.allclose(U.arx_trigamma(x), [r[2] for r in rows], rtol=1e-13, atol=0)
    for xi, dg, tg in rows:
        assert U._dg(xi) == pytest.approx(dg, rel=1e-13) and U._tg(xi) == pytest.approx(tg, rel=1e-13, abs=0)


def test_start_values_are_arxs():
    assert len(U.START_VALUES) == 16 and U.ITERATIONS_TOTAL == 17_000
    assert sorted({a for a, _ in U.START_VALUES}) == pytest.approx([0.0, 0.33, 0.66, 0.99])


# -- the metric plugins ------------------------------------------------------------------------

def _table():
    # classes on (zip, sex): (a,F) x1, (a,M) x2, (b,F) x2, (b,M) x5  -> sizes 1, 2, 2, 5
    zips = ["a"] + ["a"] * 2 + ["b"] * 2 + ["b"] * 5
    sex = ["F"] + ["M"] * 2 + ["F"] * 2 + ["M"] * 5
    return typed_table({"zip": zips, "sex": sex, "age": list(range(10))},
                       quasi={"zip": "nominal", "sex": "nominal"})


def test_reidentification_risk_metric_without_population():
    ctx = make_context()
    out = R.ReidentificationRisk().compute(None, _table(), {"threshold": 0.2, "population": None}, ctx)
    assert out["reidentification-risk"] == 1.0
    assert out["reidentification-risk.prosecutor.records_at_risk"] == 0.5
    assert out["reidentification-risk.prosecutor.average"] == 0.4
    assert out["reidentification-risk.journalist.highest"] == 1.0
    assert out["reidentification-risk.journalist.population"] == 0.0
    assert out["reidentification-risk.marketer"] == 0.4
    assert (out["reidentification-risk.records"], out["reidentification-risk.classes"]) == (10.0, 4.0)


def test_reidentification_risk_metric_with_population():
    sample = _table()
    # population: the sample's records plus more: (a,F) 3, (a,M) 2, (b,F) 10, (b,M) 5, (c,F) 4
    pz = ["a"] * 3 + ["a"] * 2 + ["b"] * 10 + ["b"] * 5 + ["c"] * 4
    ps = ["F"] * 3 + ["M"] * 2 + ["F"] * 10 + ["M"] * 5 + ["F"] * 4
    population = typed_table({"zip": pz, "sex": ps}, quasi={"zip": "nominal", "sex": "nominal"})
    ctx = make_context()
    ctx.tables = lambda name: population
    params = {"threshold": 0.2, "population": "census"}
    out = R.ReidentificationRisk().compute(None, sample, params, ctx)
    assert out["reidentification-risk.journalist.population"] == 1.0
    assert out["reidentification-risk.journalist.highest"] == 0.5
    assert out["reidentification-risk.journalist.lowest"] == 0.1
    assert out["reidentification-risk.journalist.records_at_risk"] == pytest.approx(0.3)
    assert out["reidentification-risk.marketer"] == pytest.approx((1 / 3 + 1 + 0.2 + 1) / 10)
    assert out["reidentification-risk"] == 1.0          # headline stays the prosecutor's highest
    # a population lacking a published class is refused
    ctx.tables = lambda name: typed_table({"zip": ["a"], "sex": ["F"]}, quasi={"zip": "nominal", "sex": "nominal"})
    with pytest.raises(InputError, match="do not occur in the population"):
        R.ReidentificationRisk().compute(None, sample, params, ctx)
    # a step the metric cannot load fails (the engine orders and references it; never a silent
    # fallback to the prosecutor model)
    ctx.tables = None
    with pytest.raises(RunError, match="references no other table"):
        R.ReidentificationRisk().compute(None, sample, params, ctx)


def test_nulls_are_wildcards_and_types_may_differ_in_the_population():
    # a null is a suppressed cell and matches any value: a and b are each compatible with the
    # two nulls (count 3), the nulls with everything (4): no sample unique; 3 distinct keys
    t = typed_table({"zip": ["a", None, None, "b"]}, quasi={"zip": "nominal"})
    out = R.SampleUniqueness().compute(None, t, {}, make_context())
    assert out["sample-uniqueness"] == 0.0 and out["sample-uniqueness.classes"] == 3.0
    sample = typed_table({"age": [30, 30, 41]}, quasi={"age": "nominal"})
    population = typed_table({"age": ["30", "30", "30", "41"]}, quasi={"age": "nominal"})
    ctx = make_context()
    ctx.tables = lambda name: population
    out = R.ReidentificationRisk().compute(None, sample, {"threshold": 0.4, "population": "p"}, ctx)
    assert out["reidentification-risk.journalist.highest"] == 1.0
    assert out["reidentification-risk.journalist.records_at_risk"] == pytest.approx(1 / 3)


def test_population_uniqueness_metric():
    m = R.PopulationUniquenessMetric()
    ctx = make_context()
    out = m.compute(None, _table(), {"population_size": 100, "sampling_fraction": None, "model": "dankar"}, ctx)
    pu = U.population_uniqueness([1, 2, 2, 5], None, 100)
    assert out["population-uniqueness"] == pytest.approx(pu.dankar / 100)
    assert out["population-uniqueness.dankar_model"] == U.MODEL_CODES[pu.dankar_model]
    assert out["population-uniqueness.sampling_fraction"] == 0.1
    assert out["population-uniqueness.sample_uniques"] == 1.0
    assert any("Dankar's rule chose" in n for n in ctx.notes)
    out2 = m.compute(None, _table(), {"population_size": None, "sampling_fraction": 0.1, "model": "zayatz"}, ctx)
    assert out2["population-uniqueness.population_size"] == 100.0
    assert out2["population-uniqueness"] == pytest.approx(pu.zayatz / 100)
    default = m.compute(None, _table(), {"population_size": None, "sampling_fraction": None, "model": "pitman"}, ctx)
    assert default["population-uniqueness.population_size"] == 317_238_626.0
    with pytest.raises(InputError):
        m.check({"population_size": 100, "sampling_fraction": 0.1, "model": "dankar"})


def test_metric_needs_quasi_identifiers():
    t = typed_table({"x": [1, 2]})
    with pytest.raises(InputError, match="quasi-identifier"):
        R.SampleUniqueness().compute(None, t, {}, make_context())


def test_plugins_declare_risk():
    assert [p.name for p in R.PLUGINS] == ["reidentification-risk", "sample-uniqueness", "population-uniqueness"]
    assert all(p.category == "risk" and not p.requires_original for p in R.PLUGINS)
