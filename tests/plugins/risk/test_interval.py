"""``interval-disclosure`` (sdcMicro's dRisk) and ``interval-disclosure-rmd`` (dRiskRMD): hand
examples (the arithmetic in comments), literal transcriptions of sdcMicro's R code in pandas
(independent of the plugin's numpy), and property tests on sdcMicro's Census. sdcMicro's help
pages and tests give no deterministic worked values for dRisk / dRiskRMD (their examples run
on randomly noised or microaggregated data and print no figures), and R is not installed here,
so nothing is cross-checked by running sdcMicro itself."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest

from anonflow.api import InputError
from anonflow.params import validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.microaggregation.mdav import Mdav
from anonflow_std.risk.interval import IntervalDisclosure, IntervalDisclosureRmd, rmd_risk
from tests.support import data
from tests.support.helpers import CENSUS_QI


def metric(plugin, original, released, **params):
    return plugin.compute(original, released, validate_params(plugin.params, params), make_context())


def table(columns):
    return typed_table(columns, quasi={c: "continuous" for c in columns})


X = {"a": [1.0, 2.0, 3.0, 4.0], "b": [10.0, 20.0, 30.0, 40.0]}
XM = {"a": [1.1, 2.0, 3.5, 4.0], "b": [10.0, 25.0, 30.0, 40.0]}
# sample sd of the released columns:
#   a: 1.1 2 3.5 4, mean 2.65, squares 1.55^2 + 0.65^2 + 0.85^2 + 1.35^2 = 2.4025 + 0.4225 +
#      0.7225 + 1.8225 = 5.37, / 3 = 1.79, sd = 1.3379088
#   b: 10 25 30 40, mean 26.25, squares 264.0625 + 1.5625 + 14.0625 + 189.0625 = 468.75,
#      / 3 = 156.25, sd = 12.5
# distances |x - x'|: a: 0.1, 0, 0.5, 0; b: 0, 5, 0, 0


def test_dRisk_hand_example():
    # k = 0.05: half-widths 0.0669 (a) and 0.625 (b). Record 0: a off by 0.1 > 0.0669 -> safe;
    # record 1: b off by 5 > 0.625 -> safe; record 2: a off by 0.5 -> safe; record 3 equal ->
    # at risk. dRisk = 1/4. Within per column: a records 1, 3 (2/4); b records 0, 2, 3 (3/4)
    out = metric(IntervalDisclosure(), table(X), table(XM))
    assert out == {"interval-disclosure": 0.25, "interval-disclosure.at_risk": 1.0,
                   "interval-disclosure.records": 4.0, "interval-disclosure.columns": 2.0,
                   "interval-disclosure.within.a": 0.5, "interval-disclosure.within.b": 0.75}
    # k = 0.1: half-widths 0.1338 and 1.25: record 0 (0.1 <= 0.1338) joins -> 2/4
    assert metric(IntervalDisclosure(), table(X), table(XM), k=0.1)["interval-disclosure"] == 0.5
    # k = 0.4: half-widths 0.5352 and 0.4 * 12.5 = 5: record 2 (0.5 <= 0.5352) joins, and record
    # 1 sits exactly on the edge (20 = 25 - 5): the interval is closed -> 4/4
    assert metric(IntervalDisclosure(), table(X), table(XM), k=0.4)["interval-disclosure"] == 1.0
    # k = 0: only equal values count -> record 3
    assert metric(IntervalDisclosure(), table(X), table(XM), k=0)["interval-disclosure"] == 0.25


def test_dRisk_missing_values_never_take_a_record_out_of_risk():
    # as sdcMicro's rowSums(x < mi | x > ma, na.rm = TRUE) == 0: a comparison with a missing
    # value is left out. Record 0's original a is missing, so only b (equal) is compared -> at
    # risk; record 1's released b is missing (the sd of b is then that of 10, 30, 40: 15.275,
    # half-width 0.764), so only a (equal) -> at risk. Records 2 (a off by 0.5 > 0.0669) and 3
    # (equal) as before: dRisk = 3/4
    orig = table({"a": [None, 2.0, 3.0, 4.0], "b": X["b"]})
    rel = table({"a": XM["a"], "b": [10.0, None, 30.0, 40.0]})
    assert metric(IntervalDisclosure(), orig, rel)["interval-disclosure"] == 0.75


@functools.cache
def census() -> np.ndarray:
    t = data.sdcmicro("census")
    return np.column_stack([t.column(c).to_numpy().astype(np.float64) for c in CENSUS_QI])


def census_table(X: np.ndarray):
    return table({c: X[:, j] for j, c in enumerate(CENSUS_QI)})


def sdcmicro_dRisk(x: pd.DataFrame, xm: pd.DataFrame, k: float = 0.05) -> float:
    """R/dRisk.R's dRiskWORK, line by line, in pandas."""
    sds = xm.std(ddof=1, skipna=True)  # apply(xm, 2, sd, na.rm = TRUE)
    mi = xm - k * sds  # t(t(xm) - k * sds)
    ma = xm + k * sds
    w = ((x < mi) | (x > ma)).sum(axis=1) == 0  # rowSums(x < mi | x > ma, na.rm = TRUE) == 0
    return float(w.mean())


@pytest.mark.parametrize("k", [0.05, 0.5, 2.0])
def test_dRisk_equals_the_transcription_on_census(k):
    X = census()
    rng = np.random.default_rng(4)
    Xm = X + rng.normal(size=X.shape) * X.std(axis=0) * 0.2
    expected = sdcmicro_dRisk(pd.DataFrame(X), pd.DataFrame(Xm), k)
    assert metric(IntervalDisclosure(), census_table(X), census_table(Xm), k=k)["interval-disclosure"] == expected


def mdav(X: np.ndarray, k: int):
    t = census_table(X)
    params = validate_params(Mdav.params, {"k": k})
    Mdav().check(params, table=t)
    return t, Mdav().run(t, params, make_context())


def test_dRisk_on_census_itself_noise_and_mdav():
    X = census()
    t = census_table(X)
    assert metric(IntervalDisclosure(), t, t)["interval-disclosure"] == 1.0
    rng = np.random.default_rng(0)
    noise = rng.normal(size=X.shape) * X.std(axis=0)
    # k = 0.5 (half a standard deviation): the default 0.05 gives 0 for every level below
    risks = [metric(IntervalDisclosure(), t, census_table(X + level * noise), k=0.5)["interval-disclosure"]
             for level in (0.2, 0.3, 0.5, 1.0)]
    assert 1.0 > risks[0] > risks[1] > risks[2] > risks[3]
    original, grouped = mdav(X, 3)
    r_mdav = metric(IntervalDisclosure(), original, grouped, k=0.5)["interval-disclosure"]
    assert risks[3] < r_mdav < 1.0
    # a wider interval holds more records
    assert metric(IntervalDisclosure(), original, grouped, k=1.0)["interval-disclosure"] > r_mdav


# -- dRiskRMD --------------------------------------------------------------------------------


def sdcmicro_dRiskRMD(x: np.ndarray, xm: np.ndarray, k: float = 0.01, k2: float = 0.05) -> dict:
    """R/dRiskRMD.R's dRiskRMDWORK, line by line, in pandas (covMcd replaced by scikit-learn's
    MinCovDet with the same random state, the one step no independent MCD exists for here)."""
    from sklearn.covariance import MinCovDet

    x = pd.DataFrame(x)
    xm = pd.DataFrame(xm)
    x = (x - x.mean()) / x.std(ddof=1)  # scale(x)
    xm = (xm - xm.mean()) / xm.std(ddof=1)  # scale(xm)
    cent = x.mean()
    covs = MinCovDet(random_state=0).fit(x.to_numpy()).covariance_
    d = (x - cent).to_numpy()
    rmd = pd.Series(np.sqrt(np.sum(d @ np.linalg.inv(covs) * d, axis=1)) * 0.05)  # sqrt(mahalanobis) * 0.05
    mi = x.sub(k * rmd, axis=0)
    ma = x.add(k * rmd, axis=0)
    rr = (xm > mi) & (xm < ma)
    w = np.flatnonzero(rr.any(axis=1))
    n = len(x)
    w2 = []
    if len(w):
        xv = xm.to_numpy()
        xd = np.sqrt(((xv[:, None, :] - xv[None, :, :]) ** 2).sum(axis=2))  # as.matrix(dist(xm))
        np.fill_diagonal(xd, np.nan)
        w2 = [i for i in w if np.nanmin(xd[i]) > k2]
    return {"risk1": len(w) / n, "risk2": len(w2) / n, "wrisk1": len(w) * rmd[w].sum() / n,
            "wrisk2": len(w2) * rmd[w2].sum() / n if w2 else 0.0}


def correlated(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cov = [[4.0, 1.5, 0.4], [1.5, 1.0, 0.3], [0.4, 0.3, 2.0]]
    return rng.multivariate_normal([10.0, 5.0, -2.0], cov, size=n)


@pytest.mark.parametrize("level", [0.0005, 0.003, 0.05])
def test_dRiskRMD_equals_the_transcription(level):
    pytest.importorskip("sklearn")
    X = correlated(300, 1)
    rng = np.random.default_rng(2)
    Xm = X + rng.normal(size=X.shape) * X.std(axis=0) * level
    expected = sdcmicro_dRiskRMD(X, Xm)
    ours = rmd_risk(X, Xm)
    for key in ("risk1", "risk2", "wrisk1", "wrisk2"):
        assert ours[key] == pytest.approx(expected[key], rel=1e-9, abs=1e-12), key
    cols = {"a": X[:, 0], "b": X[:, 1], "c": X[:, 2]}
    out = metric(IntervalDisclosureRmd(), table(cols), table({c: Xm[:, j] for j, c in enumerate(cols)}))
    assert out["interval-disclosure-rmd"] == expected["risk1"]
    assert out["interval-disclosure-rmd.risk2"] == expected["risk2"]
    assert out["interval-disclosure-rmd.unsafe1"] == expected["risk1"] * 300


def test_dRiskRMD_hand_checks_of_the_interval_and_the_second_stage():
    pytest.importorskip("sklearn")
    X = correlated(200, 3)
    r = rmd_risk(X, X)
    # published unchanged: every record with rmd > 0 lies strictly inside its own interval
    assert r["risk1"] == 1.0
    # ... and RMDID2 keeps those with no other released record within k2 = 0.05 (standardized)
    Z = (X - X.mean(axis=0)) / X.std(axis=0, ddof=1)
    nearest_other = np.sort(np.sqrt(((Z[:, None] - Z[None]) ** 2).sum(axis=2)), axis=1)[:, 1]
    assert r["risk2"] == np.mean(nearest_other > 0.05)
    # wrisk1 = (number unsafe) * sum(rmd of the unsafe) / n: with all unsafe, sum(rmd)
    assert r["wrisk1"] == pytest.approx(r["rmd"].sum(), rel=1e-12)
    # k = 0: no interval at all -> nothing is strictly inside
    assert rmd_risk(X, X, k=0.0)["risk1"] == 0.0
    # monotone in the noise level (the same noise pattern scaled up)
    noise = np.random.default_rng(0).normal(size=X.shape)
    risks = [rmd_risk(X, X + level * noise)["risk1"] for level in (0.0002, 0.001, 0.005, 0.05)]
    assert risks[0] > risks[1] > risks[2] > risks[3]


def test_dRiskRMD_on_census_is_singular_and_says_so_in_one_line():
    pytest.importorskip("sklearn")
    t = census_table(census())
    with pytest.raises(InputError, match="robust \\(MCD\\) covariance .* is singular") as err:
        metric(IntervalDisclosureRmd(), t, t)
    assert "\n" not in str(err.value)
    # three columns without many repeated values work: itself 1, MDAV lower
    cols = ["AFNLWGT", "AGI", "PTOTVAL"]
    three = table({c: census()[:, CENSUS_QI.index(c)] for c in cols})
    assert metric(IntervalDisclosureRmd(), three, three, columns=cols)["interval-disclosure-rmd"] == 1.0
    original, grouped = mdav(census(), 3)
    r = metric(IntervalDisclosureRmd(), original, grouped, columns=cols)["interval-disclosure-rmd"]
    assert 0.0 <= r < 0.5


def test_dRiskRMD_constant_released_column_is_left_out():
    pytest.importorskip("sklearn")
    X = correlated(200, 5)
    Xm = X.copy()
    Xm[:, 2] = 7.0  # released constant: its comparisons never hold, and it adds nothing to a distance
    r = rmd_risk(X, Xm)
    assert r["risk1"] == 1.0  # columns 0 and 1 are published unchanged: strictly inside
    Z = (X[:, :2] - X[:, :2].mean(axis=0)) / X[:, :2].std(axis=0, ddof=1)
    nearest_other = np.sort(np.sqrt(((Z[:, None] - Z[None]) ** 2).sum(axis=2)), axis=1)[:, 1]
    assert r["risk2"] == np.mean(nearest_other > 0.05)


def test_bad_inputs_give_one_line():
    t = typed_table({"a": [1.0, 2.0, 3.0], "s": ["x", "y", "z"]}, quasi={"a": "continuous", "s": "nominal"})
    for plugin in (IntervalDisclosure(), IntervalDisclosureRmd()):
        with pytest.raises(InputError, match="not numeric") as err:
            metric(plugin, t, t, columns=["a", "s"])
        assert "\n" not in str(err.value)
        with pytest.raises(InputError, match="'b' is not in both tables"):
            metric(plugin, t, t, columns=["b"])
        with pytest.raises(Exception, match="'k'"):
            validate_params(plugin.params, {"k": -1})
    two = table({"a": [1.0, 2.0]})
    with pytest.raises(InputError, match="more records than columns"):
        metric(IntervalDisclosureRmd(), two, two)
    holes = table({"a": [1.0, None, 3.0, 4.0, 5.0]})
    with pytest.raises(InputError, match="missing values"):
        metric(IntervalDisclosureRmd(), holes, holes)
    # one table (risk_before): the table against itself
    assert IntervalDisclosure().compute(None, t, validate_params(IntervalDisclosure.params, {"columns": ["a"]}),
                                        make_context())["interval-disclosure"] == 1.0
