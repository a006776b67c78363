"""il1s, eigen-utility, correlation-change and moments-change (sdcMicro's dUtility "IL1s" and
"eigen", IL_correl, summary.micro's acor/acov, relative change of means and variances):
hand-computed examples (the arithmetic in comments), properties on the Census data (identity
gives 0, the loss grows with the noise level, IL1s of Gaussian noise a*S is a/sqrt(pi)), and
the same figures recomputed with pandas and scipy. R and sdcMicro are not installed here."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.linalg

from anonflow.api import InputError
from anonflow.params import validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.utility.perturbation_loss import CorrelationChange, EigenUtility, Il1s, MomentsChange
from tests.support import data

# Census's PTOTVAL is PEARNVAL + POTHVAL exactly: its correlation matrix is singular with it
CENSUS = ["AFNLWGT", "AGI", "EMCONTRB", "FEDTAX", "STATETAX", "TAXINC", "POTHVAL", "INTVAL", "PEARNVAL",
          "FICA", "WSALVAL", "ERNVAL"]


def compute(metric, original, released, **params):
    return metric.compute(original, released, validate_params(metric.params, params), make_context())


def table(**columns):
    return typed_table({k: [float(v) for v in vs] for k, vs in columns.items()},
                       quasi={k: "continuous" for k in columns})


# -- hand-computed ---------------------------------------------------------------------------

def test_il1s_by_hand():
    # x = 1, 2, 3, 4: mean 2.5, sum of squares 2.25 + .25 + .25 + 2.25 = 5, S = sqrt(5/3) = 1.290994
    # (R's sd: divisor n - 1); x' = 1, 3, 3, 2: |x - x'| = 0, 1, 0, 2, sum 3;
    # sum term = 3 / (sqrt(2) * 1.290994) = 3 / 1.825742 = 1.643168; y unchanged: 0.
    # IL1s = 1.643168 / (n p = 4 * 2) = 0.205396; per column: x 1.643168 / 4 = 0.410792, y 0
    out = compute(Il1s(), table(x=[1, 2, 3, 4], y=[10, 20, 30, 40]), table(x=[1, 3, 3, 2], y=[10, 20, 30, 40]))
    assert out["il1s.sum"] == pytest.approx(1.6431677, rel=1e-7)  # sdcMicro's dUtility(method = "IL1s")
    assert out["il1s"] == pytest.approx(1.6431677 / 8, rel=1e-7)
    assert out["il1s.column.x"] == pytest.approx(0.4107919, rel=1e-7)
    assert out["il1s.column.y"] == 0.0 and out["il1s.missing"] == 0.0


def test_il1s_skips_a_missing_value_as_sdcmicro():
    # the pair (4, NaN) is left out of the sum (na.rm = TRUE) but not out of n p:
    # sum = 1 / 1.825742 = 0.547723; IL1s = 0.547723 / 4 = 0.136931
    out = compute(Il1s(), table(x=[1, 2, 3, 4]), table(x=[1, 3, 3, math.nan]))
    assert out["il1s"] == pytest.approx(0.5477226 / 4, rel=1e-7)
    assert out["il1s.missing"] == 1.0


def orthogonal_pair(r):
    # a, b: centred, orthogonal, the same length; y = r a + sqrt(1 - r^2) b has correlation r with a
    a = np.array([1.0, -1.0, 1.0, -1.0])
    b = np.array([1.0, 1.0, -1.0, -1.0])
    return a, r * a + math.sqrt(1 - r * r) * b


def test_eigen_utility_by_hand():
    # a 2 x 2 correlation matrix [[1, r], [r, 1]] has eigenvalues 1 + r, 1 - r.
    # r = 0.6: 1.6, 0.4; r' = 0.8: 1.8, 0.2; terms |1.6 - 1.8| / 1.6 = 0.125, |0.4 - 0.2| / 0.4 = 0.5:
    # sum 0.625, largest 0.5
    x, y = orthogonal_pair(0.6)
    x2, y2 = orthogonal_pair(0.8)
    out = compute(EigenUtility(), table(x=x, y=y), table(x=x2, y=y2))
    assert out["eigen-utility"] == pytest.approx(0.625, rel=1e-12)
    assert out["eigen-utility.max"] == pytest.approx(0.5, rel=1e-12)
    assert out["eigen-utility.columns"] == 2


def test_correlation_change_by_hand():
    # original x = a, y = b, z = c (orthogonal): R = I, inverse diagonal (1, 1, 1), unit-scaled
    # 1/sqrt(3) = 0.577350 each. Released y' = 0.6 a + 0.8 b: R' has r(x, y) = 0.6, its inverse's
    # diagonal 1 / (1 - 0.36) = 1.5625, 1.5625, 1; length sqrt(2 * 1.5625^2 + 1) = 2.425451:
    # (0.644210, 0.644210, 0.412294). Differences 0.066860, 0.066860, -0.165056; squares sum
    # 0.0361839; IL_correl = sqrt(0.0361839) / sqrt(2) = 0.190221 / 1.414214 = 0.134506.
    # Correlations changed: (x, y) by 0.6, the two others by 0: mean 0.2, largest 0.6;
    # acor skips the entries whose original is 0: only the diagonal, unchanged: 0
    a = np.array([1.0, -1.0, 1.0, -1.0])
    b = np.array([1.0, 1.0, -1.0, -1.0])
    c = np.array([1.0, -1.0, -1.0, 1.0])
    out = compute(CorrelationChange(), table(x=a, y=b, z=c), table(x=a, y=0.6 * a + 0.8 * b, z=c))
    assert out["correlation-change"] == pytest.approx(0.1345063, rel=1e-6)
    assert out["correlation-change.mean_abs"] == pytest.approx(0.2)
    assert out["correlation-change.max_abs"] == pytest.approx(0.6)
    assert out["correlation-change.acor"] == 0.0


def test_il_correl_of_two_columns_is_zero_and_acor_acov_by_hand():
    # with two columns both inverse diagonals are equal (1 / (1 - r^2) twice): IL_correl = 0.
    # r = 0.6 -> 0.8: acor = (|0.2| / 0.6 twice) / (2 * 2) = 0.666667 / 4 = 0.166667.
    # covariances: var(a) = 4 / 3 (sum of squares 4, n - 1 = 3) = var(y); cov 0.6 * 4/3 = 0.8 ->
    # 0.8 * 4/3 = 1.066667: acov = (0.266667 / 0.8 twice) / 4 = 0.166667
    x, y = orthogonal_pair(0.6)
    x2, y2 = orthogonal_pair(0.8)
    out = compute(CorrelationChange(), table(x=x, y=y), table(x=x2, y=y2))
    assert out["correlation-change"] == pytest.approx(0.0, abs=1e-12)
    assert out["correlation-change.acor"] == pytest.approx(1 / 6, rel=1e-12)
    assert out["correlation-change.acov"] == pytest.approx(1 / 6, rel=1e-12)


def test_moments_change_by_hand():
    # x = 1, 2, 3, 4: mean 2.5, variance 5/3; x' = 1, 3, 3, 5: mean 3, deviations -2, 0, 0, 2,
    # variance 8/3. Mean: 0.5 / 2.5 = 0.2; variance: (8/3 - 5/3) / (5/3) = 0.6.
    # w = -1, 1, -1, 1: mean 0 (measured in standard deviations, sqrt(4/3) = 1.154701), variance 4/3;
    # w' = 0, 2, 0, 2: mean 1 -> 1 / 1.154701 = 0.866025; variance 4/3: 0. Largest: 0.866025
    ctx = make_context()
    metric = MomentsChange()
    out = metric.compute(table(x=[1, 2, 3, 4], w=[-1, 1, -1, 1]), table(x=[1, 3, 3, 5], w=[0, 2, 0, 2]),
                         validate_params(metric.params, {}), ctx)
    assert out["moments-change.mean.x"] == pytest.approx(0.2)
    assert out["moments-change.variance.x"] == pytest.approx(0.6)
    assert out["moments-change.mean.w"] == pytest.approx(0.8660254)
    assert out["moments-change.variance.w"] == 0.0
    assert out["moments-change"] == pytest.approx(0.8660254)
    assert out["moments-change.mean_max"] == pytest.approx(0.8660254)
    assert out["moments-change.variance_max"] == pytest.approx(0.6)
    assert ctx.notes == ["moments-change: the original mean of 'w' is 0; its change is given in standard deviations"]


# -- bad input: one line ---------------------------------------------------------------------

def test_bad_input_is_one_line():
    t = table(x=[1, 2, 3, 4], y=[2, 4, 6, 8])
    with pytest.raises(InputError, match=r"columns x, y are linearly dependent"):
        compute(EigenUtility(), t, t)
    with pytest.raises(InputError, match=r"original table's correlation matrix is singular: columns x, y"):
        compute(CorrelationChange(), t, t)
    const = table(x=[1, 1, 1, 1])
    with pytest.raises(InputError, match=r"il1s: column 'x' is constant in the original"):
        compute(Il1s(), const, const)
    with pytest.raises(InputError, match=r"moments-change: column 'x' is constant"):
        compute(MomentsChange(), const, const)
    with pytest.raises(InputError, match=r"column 'y' is constant in the released table"):
        compute(EigenUtility(), table(x=[1, 2, 3, 4], y=[1, 3, 2, 5]), table(x=[1, 2, 3, 4], y=[2, 2, 2, 2]))
    with pytest.raises(InputError, match="column 'nope' is not in both tables"):
        compute(Il1s(), t, t, columns=["nope"])
    with pytest.raises(InputError, match="hold different records"):
        compute(Il1s(), t, table(x=[1, 2, 3], y=[1, 2, 3]))
    labels = typed_table({"x": ["[1-2]", "[1-2]", "[3-4]", "[3-4]"]}, quasi={"x": "continuous"})
    with pytest.raises(InputError, match="'x'"):
        compute(Il1s(), table(x=[1, 2, 3, 4]), labels)


# -- real data -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def census():
    t = data.sdcmicro("census")
    return pd.DataFrame({c: t.column(c).to_numpy().astype(np.float64) for c in CENSUS})


def typed(df):
    return typed_table({c: df[c].to_numpy() for c in df.columns}, quasi={c: "continuous" for c in df.columns})


def noised(df, level, seed=1):
    """Gaussian noise of standard deviation level * the column's (population) deviation."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({c: df[c] + rng.normal(0.0, level * df[c].std(ddof=0), len(df)) for c in df.columns})


METRICS = (Il1s(), EigenUtility(), CorrelationChange(), MomentsChange())


def test_identity_gives_zero_loss_on_census(census):
    t = typed(census)
    for metric in METRICS:
        out = compute(metric, t, t)
        assert all(v == 0 for k, v in out.items() if k != f"{metric.name}.columns"), (metric.name, out)


def test_loss_grows_with_the_noise_level_on_census(census):
    t = typed(census)
    levels = (0.02, 0.1, 0.3, 1.0)
    series = {m.name: [compute(m, t, typed(noised(census, a)))[m.name] for a in levels] for m in METRICS}
    for name, values in series.items():
        assert all(a < b for a, b in zip(values, values[1:])), (name, values)
    # E|N(0, a^2 S^2)| / (sqrt(2) S) = a sqrt(2/pi) / sqrt(2) = a / sqrt(pi), over 12,960 cells
    for a, v in zip(levels, series["il1s"]):
        assert v == pytest.approx(a / math.sqrt(math.pi), rel=0.03)


def test_recomputed_with_pandas_and_scipy(census):
    released = noised(census, 0.2, seed=5)
    o, r = typed(census), typed(released)
    # IL1s: pandas' std is R's (ddof 1)
    il1s = (census - released).abs().div(census.std() * math.sqrt(2)).to_numpy().mean()
    assert compute(Il1s(), o, r)["il1s"] == pytest.approx(il1s, rel=1e-10)
    # eigen: scipy's eigenvalues of pandas' correlation matrices
    e1 = np.sort(scipy.linalg.eigh(census.corr().to_numpy(), eigvals_only=True))[::-1]
    e2 = np.sort(scipy.linalg.eigh(released.corr().to_numpy(), eigvals_only=True))[::-1]
    assert compute(EigenUtility(), o, r)["eigen-utility"] == pytest.approx(np.sum(np.abs(e1 - e2) / e1), rel=1e-6)
    # IL_correl, written out as sdcMicro's R code does it
    d1 = np.diag(scipy.linalg.inv(census.corr().to_numpy()))
    d2 = np.diag(scipy.linalg.inv(released.corr().to_numpy()))
    lam = np.sqrt(np.sum((d1 / np.sqrt(np.sum(d1 ** 2)) - d2 / np.sqrt(np.sum(d2 ** 2))) ** 2)) / np.sqrt(2)
    out = compute(CorrelationChange(), o, r)
    assert out["correlation-change"] == pytest.approx(lam, rel=1e-6)
    diff = (census.corr() - released.corr()).abs().to_numpy()
    assert out["correlation-change.mean_abs"] == pytest.approx(diff[np.triu_indices(len(CENSUS), 1)].mean(),
                                                                 rel=1e-9)
    cov1, cov2 = census.cov().to_numpy(), released.cov().to_numpy()
    assert out["correlation-change.acov"] == pytest.approx(
        np.sum(np.abs(cov1 - cov2) / np.abs(cov1)) / (2 * len(CENSUS)), rel=1e-9)
    # moments: pandas' mean and var (ddof 1)
    moments = compute(MomentsChange(), o, r)
    rel_mean = ((released.mean() - census.mean()).abs() / census.mean().abs())
    rel_var = ((released.var() - census.var()).abs() / census.var())
    for c in CENSUS:
        assert moments[f"moments-change.mean.{c}"] == pytest.approx(rel_mean[c], rel=1e-9)
        assert moments[f"moments-change.variance.{c}"] == pytest.approx(rel_var[c], rel=1e-9)
    assert moments["moments-change"] == pytest.approx(max(rel_mean.max(), rel_var.max()), rel=1e-9)


def test_census_with_ptotval_names_the_dependent_columns(census):
    t = data.sdcmicro("census")
    full = typed_table({c: t.column(c).to_numpy().astype(np.float64) for c in t.column_names},
                       quasi={c: "continuous" for c in t.column_names})
    with pytest.raises(InputError, match="columns PTOTVAL, POTHVAL, PEARNVAL are linearly dependent"):
        compute(EigenUtility(), full, full)


def test_covariance_blocks_and_complete_records(monkeypatch):
    # accumulated over blocks of 3 rows, the covariance of 10 records is numpy's (ddof 1); a record
    # with a missing value is left out of every entry (R's use = "complete.obs")
    from anonflow_std.utility import perturbation_loss

    rng = np.random.default_rng(3)
    x, y = rng.normal(size=10), rng.normal(size=10)
    monkeypatch.setattr(perturbation_loss, "BLOCK", 3)
    cov, n = perturbation_loss.covariance([x, y])
    assert n == 10 and cov == pytest.approx(np.cov(x, y), rel=1e-12)
    y[4] = math.nan
    cov, n = perturbation_loss.covariance([x, y])
    keep = np.arange(10) != 4
    assert n == 9 and cov == pytest.approx(np.cov(x[keep], y[keep]), rel=1e-12)
