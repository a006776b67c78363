"""sdcMicro's risk measures as anonflow metrics: ``individual-risk`` (measure_risk's individual
and global risk with sampling weights) and ``suda2`` (minimal sample uniques, SUDA and DIS
scores). Hand-computed examples (the arithmetic in comments), values taken from sdcMicro's own
test files (``tests/testthat/test_indivRisk.R``, ``test_suda2.R``), and property tests against
a brute-force MSU enumerator. R and sdcMicro are not installed here, so nothing is cross-checked
by running sdcMicro itself."""

from __future__ import annotations

import math
import textwrap
from itertools import combinations

import numpy as np
import pyarrow as pa
import pytest

from anonflow.api import InputError
from anonflow.params import validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.risk.individual import IndividualRisk, key_risk, series_risk
from anonflow_std.risk.suda import Suda2, encode_keys, minimal_sample_uniques, suda2

# -- individual risk ------------------------------------------------------------------------

# sdcMicro's test_indivRisk.R data (keys A, B, C; weight w), without missing values
SDC_A = [2, 3, 2, 2, 3, 3, 1, 2]
SDC_B = [3, 3, 3, 3, 3, 3, 4, 3]
SDC_C = [1, 3, 1, 2, 1, 1, 1, 1]
SDC_W = [18.0, 45.5, 39.0, 17.0, 92.0, 8.0, 123.5, 51.0]
# keys: (2,3,1) records 1,3,8: f=3, F=18+39+51=108, p=1/36
#       (3,3,3) record 2:      f=1, F=45.5
#       (2,3,2) record 4:      f=1, F=17
#       (3,3,1) records 5,6:   f=2, F=92+8=100, p=0.02
#       (1,4,1) record 7:      f=1, F=123.5
# sdcMicro's expected rk (indivRisk, qual = 1, survey = TRUE):
SDC_APPROX = [0.01369863, 0.08579129, 0.01369863, 0.17707583, 0.01877883, 0.01877883, 0.03931625, 0.01369863]
SDC_EXACT = [0.01355297, 0.08579129, 0.01355297, 0.17707583, 0.01877883, 0.01877883, 0.03931625, 0.01355297]


def metric(plugin, table, **params):
    return plugin.compute(None, table, validate_params(plugin.params, params), make_context())


def sdc_table(**extra):
    return typed_table({"A": SDC_A, "B": SDC_B, "C": SDC_C, "w": SDC_W, **extra},
                       quasi={"A": "nominal", "B": "nominal", "C": "nominal"})


def test_special_case_f1():
    # f = 1: r = p/(1-p) * ln(1/p). F = 17: p = 1/17, p/(1-p) = 1/16,
    # r = ln(17) / 16 = 2.833213344 / 16 = 0.177075834
    r = key_risk(np.array([1]), np.array([17.0]))
    assert r[0] == pytest.approx(math.log(17) / 16, rel=1e-14)
    assert r[0] == pytest.approx(0.17707583, abs=5e-9)  # sdcMicro's value


def test_special_case_f2():
    # f = 2: r = p/(1-p) - (p/(1-p))^2 ln(1/p). F = 100: p = 0.02, p/(1-p) = 1/49,
    # r = 1/49 - ln(50)/49^2 = 0.020408163 - 3.912023005/2401 = 0.020408163 - 0.001629331 = 0.018778833
    for method in ("approx", "exact"):
        r = key_risk(np.array([2]), np.array([100.0]), method)
        assert r[0] == pytest.approx(1 / 49 - math.log(50) / 49 ** 2, rel=1e-14)
        assert r[0] == pytest.approx(0.01877883, abs=5e-9)


def test_special_case_f3():
    # f = 3, F = 108: p = 1/36.
    # approx: r = p / (f - 1 + p) = (1/36) / (2 + 1/36) = 1/73 = 0.01369863
    assert key_risk(np.array([3]), np.array([108.0]), "approx")[0] == pytest.approx(1 / 73, rel=1e-14)
    # exact: r = p (1-3p) / (2 (1-p)^2) - (p/(1-p))^3 ln p
    #          = (1/36)(33/36) / (2 (35/36)^2) + (1/35)^3 ln 36
    #          = 33 / (2 * 35^2) + ln(36) / 35^3 = 0.013469388 + 0.000083581 = 0.013552969
    r = key_risk(np.array([3]), np.array([108.0]), "exact")[0]
    assert r == pytest.approx(33 / (2 * 35 ** 2) + math.log(36) / 35 ** 3, rel=1e-13)
    assert r == pytest.approx(0.01355297, abs=5e-9)  # sdcMicro's value
    assert r == pytest.approx(series_risk(3, 1 / 36), rel=1e-10)


def test_general_case_approx_and_exact():
    # f = 5, F = 50: p = 0.1. approx: p / (f - 1 + p) = 0.1 / 4.1 = 0.024390244
    assert key_risk(np.array([5]), np.array([50.0]), "approx")[0] == pytest.approx(0.1 / 4.1, rel=1e-14)
    # exact: E[1/F | f] = sum_{h>=5} (1/h) C(h-1, 4) 0.1^5 0.9^(h-5) = 0.024235001 (summed directly);
    # a little below the approximation
    r = key_risk(np.array([5]), np.array([50.0]), "exact")[0]
    assert r == pytest.approx(series_risk(5, 0.1), rel=1e-12)
    assert r == pytest.approx(0.0242350012, rel=1e-9)
    assert r < 0.1 / 4.1


def sdcmicro_exact(f: int, p: float) -> float:
    """sdcMicro's indivRisk(method = "exact") for f > 2, transcribed (R/indivRisk.R)."""
    A = (p ** (1 - f) - 1) / (f - 1)

    def B(i):
        return (f - 1 - i) ** 2 / ((i + 1) * (f - 2 - i)) * (p ** (i + 2 - f) - 1) / (p ** (i + 1 - f) - 1)

    bb = sum((-1) ** (m + 1) * math.prod(B(m2) for m2 in range(m + 1)) for m in range(f - 2))
    return (p / (1 - p)) ** f * (A * (1 + bb) + (-1) ** f * math.log(p))


@pytest.mark.parametrize("f", [3, 4, 5, 7, 10])
@pytest.mark.parametrize("p", [0.5, 0.1, 0.02, 0.001])
def test_exact_equals_sdcmicro_series_and_definition(f, p):
    # sdcMicro's alternating closed form, the direct sum of the definition and ours agree where
    # sdcMicro's form is still precise (small f)
    ours = key_risk(np.array([f]), np.array([f / p]), "exact")[0]
    assert ours == pytest.approx(series_risk(f, p, terms=400_000), rel=1e-9)
    assert ours == pytest.approx(sdcmicro_exact(f, p), rel=1e-8)


def test_exact_large_keys_stay_finite():
    # scipy's hyp2f1 gives NaN here; the direct hypergeometric series does not
    f = np.array([30, 100, 1000, 30000])
    F = f / np.array([1e-3, 1e-4, 1e-3, 1e-6])
    r = key_risk(f, F, "exact")
    assert np.all(np.isfinite(r))
    # for small p, r ~ p / (f - 1 + p), the approximation
    assert r == pytest.approx(key_risk(f, F, "approx"), rel=1e-5)
    assert r[0] == pytest.approx(series_risk(30, 1e-3, terms=400_000), rel=1e-9)


def test_population_keys_risk_one_over_f():
    # F_k = f_k: the sample is the population for that key, r = 1/f (sdcMicro's fk == Fk)
    r = key_risk(np.array([1, 2, 5]), np.array([1.0, 2.0, 5.0]), "exact")
    assert r.tolist() == [1.0, 0.5, 0.2]


def test_risk_decreases_with_population_and_is_a_probability():
    f = np.repeat(np.arange(1, 12), 50)
    F = f * np.tile(np.geomspace(1.0001, 1e5, 50), 11)
    for method in ("approx", "exact"):
        r = key_risk(f, F, method)
        assert np.all((r > 0) & (r <= 1))
        assert np.all(np.diff(r.reshape(11, 50), axis=1) < 0)  # more population units: lower risk


def test_metric_on_sdcmicro_data_approx():
    values = metric(IndividualRisk(), sdc_table(), weight="w")
    # expected re-identifications = sum of the records' risks:
    # 3/73 + 0.08579129 + 0.17707583 + 2 * 0.01877883 + 0.03931625 = 0.38083692; / 8 = 0.04760462
    er = sum(SDC_APPROX)
    assert values["individual-risk.expected_reidentifications"] == pytest.approx(er, abs=1e-7)
    assert values["individual-risk"] == pytest.approx(er / 8, abs=1e-8)
    assert values["individual-risk.max"] == pytest.approx(0.17707583, abs=5e-9)
    assert values["individual-risk.above_threshold"] == 1  # threshold 0.1 by default: record 4 (0.1771)
    assert values["individual-risk.sample_uniques"] == 3
    assert values["individual-risk.keys"] == 5
    assert values["individual-risk.records"] == 8
    v = metric(IndividualRisk(), sdc_table(), weight="w", threshold=0.05)
    assert v["individual-risk.above_threshold"] == 2  # records 2 (0.0858) and 4 (0.1771)


def test_metric_on_sdcmicro_data_exact():
    values = metric(IndividualRisk(), sdc_table(), weight="w", method="exact")
    assert values["individual-risk.expected_reidentifications"] == pytest.approx(sum(SDC_EXACT), abs=1e-7)


def test_population_size_weighs_every_record_n_over_n():
    # 4 records, N = 40: weight 10 each. Key (1, x) twice: f=2, F=20, p=0.1:
    #   r = (1/9) - (1/9)^2 ln 10 = 0.111111111 - 0.028427 = 0.082684135
    # keys (2, x) and (1, y): f=1, F=10, p=0.1: r = (1/9) ln 10 = 0.255842788
    # expected = 2 * 0.082684135 + 2 * 0.255842788 = 0.677053845; global = / 4 = 0.169263461
    t = typed_table({"a": [1, 1, 2, 1], "b": ["x", "x", "x", "y"]}, quasi={"a": "nominal", "b": "nominal"})
    values = metric(IndividualRisk(), t, population_size=40)
    r2 = 1 / 9 - math.log(10) / 81
    r1 = math.log(10) / 9
    assert values["individual-risk.expected_reidentifications"] == pytest.approx(2 * r2 + 2 * r1, rel=1e-12)
    assert values["individual-risk"] == pytest.approx((2 * r2 + 2 * r1) / 4, rel=1e-12)
    # the same with an explicit weight column of 10s
    tw = typed_table({"a": [1, 1, 2, 1], "b": ["x", "x", "x", "y"], "w": [10.0] * 4},
                     quasi={"a": "nominal", "b": "nominal"})
    assert metric(IndividualRisk(), tw, weight="w") == values


def test_without_weights_the_sample_is_the_population():
    # sdcMicro's measure_risk without w: r = 1/f. Keys f = 2, 1, 1: expected = 2*(1/2) + 1 + 1 = 3
    t = typed_table({"a": [1, 1, 2, 1], "b": ["x", "x", "x", "y"]}, quasi={"a": "nominal", "b": "nominal"})
    values = metric(IndividualRisk(), t)
    assert values["individual-risk.expected_reidentifications"] == 3.0
    assert values["individual-risk"] == 0.75
    assert values["individual-risk.max"] == 1.0
    assert values["individual-risk.above_threshold"] == 4  # 0.5, 0.5, 1, 1 > 0.1
    # strictly above: the two records of risk 0.5 are not above 0.5
    assert metric(IndividualRisk(), t, threshold=0.5)["individual-risk.above_threshold"] == 2
    # population_size = n is the same
    assert metric(IndividualRisk(), t, population_size=4) == values


def test_nulls_are_wildcards_and_labels_are_values():
    # a null (suppressed cell) matches any value, as sdcMicro's freqCalc; a generalized label is
    # a value like any other
    t = typed_table({"age": ["[20-30[", "[20-30[", None, None, "[30-40["], "sex": ["M", "M", "F", "F", None]},
                    quasi={"age": "nominal", "sex": "nominal"})
    values = metric(IndividualRisk(), t)
    # keys: ([20-30[, M) x2: f = 2; (null, F) x2: itself and ([30-40[, null), f = 3;
    # ([30-40[, null) x1: f = 3. expected = 2/2 + 2/3 + 1/3 = 2
    assert values["individual-risk.keys"] == 3
    assert values["individual-risk.expected_reidentifications"] == pytest.approx(2.0)


def test_individual_risk_refusals():
    plugin = IndividualRisk()
    with pytest.raises(InputError, match="not both"):
        plugin.check(validate_params(plugin.params, {"weight": "w", "population_size": 100}), anonymized=sdc_table())
    with pytest.raises(InputError, match="'v' is not in the table"):
        plugin.check(validate_params(plugin.params, {"weight": "v"}), anonymized=sdc_table())
    with pytest.raises(InputError, match="less than its number of records"):
        metric(plugin, sdc_table(v=[0.5] * 8), weight="v")
    with pytest.raises(InputError, match="not positive"):
        metric(plugin, sdc_table(v=[1.0] * 7 + [None]), weight="v")
    with pytest.raises(InputError, match="below the 8 records"):
        metric(plugin, sdc_table(), population_size=7)


def test_individual_risk_empty_table():
    t = typed_table({"a": pa.array([], pa.int64())}, quasi={"a": "nominal"})
    values = metric(IndividualRisk(), t)
    assert values["individual-risk"] == 0.0 and values["individual-risk.records"] == 0.0


# -- SUDA2 ----------------------------------------------------------------------------------

def brute_force_msus(rows: list[tuple], max_size: int) -> dict[tuple[int, ...], set[int]]:
    """Every (column subset, record) with the subset an MSU of the record, from the definition:
    the record is alone with its values on the subset, and on none of its proper subsets."""
    n, m = len(rows), len(rows[0]) if rows else 0

    def unique(r, S):
        return sum(all(rows[t][j] == rows[r][j] for j in S) for t in range(n)) == 1

    out: dict[tuple[int, ...], set[int]] = {}
    for k in range(1, min(max_size, m) + 1):
        for S in combinations(range(m), k):
            for r in range(n):
                if unique(r, S) and not any(unique(r, T) for i in range(1, k) for T in combinations(S, i)):
                    out.setdefault(S, set()).add(r)
    return out


def test_suda2_by_hand():
    # r0 (a, x, 1), r1 (a, x, 2), r2 (a, y, 1), r3 (b, y, 1), r4 (b, y, 1)
    # singletons: A: a x3, b x2; B: x x2, y x3; C: 1 x4, 2 x1 -> {C} is an MSU of r1
    # pairs: {A,B}: (a,y) only r2 -> MSU of r2 (r2's singletons are shared)
    #        {A,C}: (a,2) only r1, but {C} is unique already -> not minimal
    #        {B,C}: (x,1) only r0 -> MSU of r0; (x,2) r1 -> not minimal
    # triple: r0, r1, r2 unique, each already unique on a pair or single -> no 3-MSU
    # r3, r4 are identical: no MSU
    cols = {"A": ["a", "a", "a", "b", "b"], "B": ["x", "x", "y", "y", "y"], "C": [1, 2, 1, 1, 1]}
    t = pa.table(cols)
    res = suda2(encode_keys(t, list(cols)), max_size=3)
    assert {S: set(np.flatnonzero(mask)) for S, mask in res.msus.items()} == {(2,): {1}, (1, 2): {0}, (0, 1): {2}}
    assert res.msu_counts.tolist() == [[0, 1, 0], [1, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0]]
    # m = 3: weights (3-1)! = 2 for size 1, (3-2)! = 1 for size 2, (3-3)! = 1 for size 3
    assert res.score.tolist() == [1.0, 2.0, 1.0, 0.0, 0.0]
    # U = 3 (r0, r1, r2 unique on A,B,C), P = 2 (r3, r4)
    assert (res.uniques, res.pairs) == (3, 2)
    # Q = 1 + (8-3)/20 = 1.25; A = 1 + 2^-1.25 + 1 = 2.420448; P(1-d)/d = 2 * 0.99 / 0.01 = 198
    # (sdcMicro: D = 3*0.01 / (3*0.01 + 2*0.99) = 0.0149254, U/D - U = 201 - 3 = 198)
    # dis r0 = 1 / (1 + 198 / (1 * 2.420448)) = 1 / 82.8031 = 0.0120769
    # dis r1 = 1 / (1 + 198 / (2^1.25 * 2.420448)) = 1 / (1 + 198 / 5.756828) = 1 / 35.39401 = 0.0282534
    A = 2 + 2 ** -1.25
    assert res.dis[0] == pytest.approx(1 / (1 + 198 / A), rel=1e-12)
    assert res.dis[1] == pytest.approx(1 / (1 + 198 / (2 ** 1.25 * A)), rel=1e-12)
    assert res.dis[0] == pytest.approx(0.0120769, abs=1e-7)
    assert res.dis[1] == pytest.approx(0.0282534, abs=1e-7)
    assert res.dis[2] == res.dis[0] and res.dis[3] == res.dis[4] == 0
    # contributions: {C} (weight 2), {B,C} (1), {A,B} (1); total score 4:
    # A: 1/4 = 25 %, B: 2/4 = 50 %, C: 3/4 = 75 %
    assert res.contribution.tolist() == [25.0, 50.0, 75.0]


def test_suda2_metric_values_by_hand():
    t = typed_table({"A": ["a", "a", "a", "b", "b"], "B": ["x", "x", "y", "y", "y"], "C": [1, 2, 1, 1, 1]},
                    quasi={"A": "nominal", "B": "nominal", "C": "nominal"})
    v = metric(Suda2(), t)
    assert v["suda2.records_with_msu"] == 3
    assert v["suda2.msus"] == 3
    assert (v["suda2.msus_size_1"], v["suda2.msus_size_2"], v["suda2.msus_size_3"]) == (1, 2, 0)
    assert v["suda2.score_max"] == 2.0 and v["suda2.score_mean"] == 4 / 5
    assert v["suda2.dis_max"] == pytest.approx(0.0282534, abs=1e-7)
    assert v["suda2"] == v["suda2.dis_mean"] == pytest.approx((2 * 0.0120769 + 0.0282534) / 5, abs=1e-7)
    # DIS bins as sdcMicro's print.suda2: two records at 0, three in (0, 0.1]
    assert v["suda2.dis_eq_0"] == 2 and v["suda2.dis_upto_0.1"] == 3 and v["suda2.dis_above_0.7"] == 0
    assert v["suda2.contribution.B"] == 50.0
    assert (v["suda2.sample_uniques"], v["suda2.pairs"], v["suda2.records"]) == (3, 2, 5)


def test_suda2_sdcmicro_examples():
    # expectations from sdcMicro's tests/testthat/test_suda2.R (commented out there)
    book = {"age": ["20s"] * 7 + ["60s"], "gender": ["male"] * 4 + ["female"] * 3 + ["male"],
            "income": ["50k+", "50k+"] + ["50k-"] * 6,
            "education": ["highschool"] * 4 + ["university", "highschool", "middleschool", "university"]}
    res = suda2(encode_keys(pa.table(book), list(book)), max_size=None)
    assert res.score[4:].tolist() == [4, 2, 6, 8]
    guideline = {
        "Residence": ["Urban"] * 4 + ["Rural"] + ["Urban"] * 5,
        "Gender": ["Female", "Female", "Female", "Male", "Female", "Male", "Female", "Male", "Female", "Female"],
        "Education": ["Secondary incomplete", "Secondary incomplete", "Primary incomplete", "Secondary complete",
                      "Secondary complete", "Secondary complete", "Primary complete", "Post-secondary",
                      "Secondary incomplete", "Secondary incomplete"],
        "Labor": ["Employed", "Employed", "Non-LF", "Employed", "Unemployed", "Employed", "Non-LF", "Unemployed",
                  "Non-LF", "Non-LF"]}
    res = suda2(encode_keys(pa.table(guideline), list(guideline)), max_size=None)
    assert res.score.tolist() == [0, 0, 6, 0, 12, 0, 6, 10, 0, 0]
    small = {"a": [2, 1, 1], "b": [0, 3, 0], "c": [0, 6, 0]}
    res = suda2(encode_keys(pa.table(small), list(small)), max_size=None)
    assert res.contribution.tolist() == [50.0, 37.5, 37.5]


def random_rows(rng, n, m, alphabet):
    vals = rng.integers(0, alphabet, size=(n, m))
    rows = [tuple(None if v == alphabet - 1 and alphabet > 2 else int(v) for v in row) for row in vals]
    return rows


@pytest.mark.parametrize("seed", range(60))
def test_suda2_msus_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 25)), int(rng.integers(1, 6))
    rows = random_rows(rng, n, m, int(rng.integers(2, 5)))
    cols = [f"q{j}" for j in range(m)]
    table = pa.table({c: pa.array([r[j] for r in rows], pa.int64()) for j, c in enumerate(cols)})
    codes = encode_keys(table, cols)
    for max_size in range(1, m + 1):
        found = {S: set(np.flatnonzero(mask).tolist()) for S, mask in minimal_sample_uniques(codes, max_size).items()}
        assert found == brute_force_msus(rows, max_size)


@pytest.mark.parametrize("seed", range(20))
def test_suda2_invariants(seed):
    rng = np.random.default_rng(1000 + seed)
    n, m = int(rng.integers(5, 200)), int(rng.integers(3, 7))
    codes = rng.integers(0, int(rng.integers(2, 6)), size=(n, m))
    full = suda2(codes, max_size=None)
    _, inv, cnt = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    shared = cnt[inv.reshape(-1)] >= 2
    # a record sharing all its values with another has no MSU, score 0 and DIS 0
    assert np.all(full.score[shared] == 0) and np.all(full.dis[shared] == 0)
    # searching every size, every record unique on all columns has an MSU
    assert np.array_equal(full.msu_counts.sum(axis=1) > 0, ~shared)
    assert full.uniques == int((~shared).sum())
    assert np.all((full.dis >= 0) & (full.dis <= 1))
    # a smaller max_size finds exactly the MSUs of those sizes
    for k in range(1, m):
        part = suda2(codes, max_size=k)
        assert np.array_equal(part.msu_counts, full.msu_counts[:, :k])
    # the order of the records does not matter
    perm = rng.permutation(n)
    shuffled = suda2(codes[perm], max_size=3)
    base = suda2(codes, max_size=3)
    assert np.array_equal(shuffled.score, base.score[perm])
    assert np.allclose(shuffled.dis, base.dis[perm], rtol=1e-12, atol=0)
    # neither does the order of the columns (scores are symmetric in them)
    cperm = rng.permutation(m)
    assert np.array_equal(suda2(codes[:, cperm], max_size=3).score, base.score)


def test_suda2_refuses_too_many_subsets():
    cols = {f"q{j}": [1, 2] for j in range(40)}
    t = typed_table(cols, quasi={c: "nominal" for c in cols})
    plugin = Suda2()
    with pytest.raises(InputError, match="lower max_size"):
        plugin.check(validate_params(plugin.params, {"max_size": 10}), anonymized=t)


def test_suda2_on_adult_fast_enough(data_dir):
    import time

    import pyarrow.csv as pacsv

    t = pacsv.read_csv(data_dir / "arx" / "adult.csv", parse_options=pacsv.ParseOptions(delimiter=";"))
    cols = t.column_names[:8]
    start = time.perf_counter()
    res = suda2(encode_keys(t, cols), max_size=3)
    assert time.perf_counter() - start < 30
    assert res.score.size == t.num_rows
    assert 0 < res.dis.max() < 1


# -- both, in a workflow ----------------------------------------------------------------------

def test_in_a_workflow(tmp_path):
    from anonflow import registry as plugins
    from anonflow import testing

    reg = plugins.get_registry()
    if not (reg.has("metric", "individual-risk") and reg.has("metric", "suda2")):
        pytest.skip("the risk metrics are not registered (automatic registration of PLUGINS modules not in place)")
    rows = ["A,B,C,w"] + [f"{a},{b},{c},{w}" for a, b, c, w in zip(SDC_A, SDC_B, SDC_C, SDC_W)]
    (tmp_path / "sdc.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    result = testing.run_workflow(textwrap.dedent("""\
        name: risk
        sources:
          sdc: {path: sdc.csv}
        steps:
          typed:
            uses: typing
            input: sdc
            with: {quasi: {A: nominal, B: nominal, C: nominal}, insensitive: [w]}
          risk:
            uses: evaluate
            input: typed
            with:
              metrics: {individual-risk: {weight: w}, suda2: {max_size: 2}}
        """), tmp_path)
    assert result.metrics["risk.individual-risk.expected_reidentifications"] == pytest.approx(sum(SDC_APPROX),
                                                                                               abs=1e-7)
    assert "risk.suda2.records_with_msu" in result.metrics
