"""The ``noise`` methods after sdcMicro's ``additive0``, ``correlated2``, ``restr``, ``ROMM`` and
``outdect``: formulas on hand-computed arrays, ROMM against a direct transcription of sdcMicro's
R code, properties on the Census data checked with numpy/scipy/scikit-learn written here, one
workflow through the CLI (byte-identical repeats, another seed differs) and bad parameters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from anonflow.errors import InputError
from anonflow.params import ParamError, validate_params
from anonflow.testing import typed_table
from anonflow_std.perturbation import noise_methods as nm
from anonflow_std.perturbation.noise import Noise, add_noise

from tests.plugins.perturbation.test_noise import census, census_table, declared, repeat_runs, run, workflow
from tests.support.helpers import CENSUS_QI

# -- additive0, correlated2, restr on small arrays -------------------------------------------


def test_additive0_keeps_zeros_and_is_additive_elsewhere():
    # x = 0, 1, 2, 3: sd = sqrt(5/3) = 1.29099; noise 100 %: x' = x + 1.29099 z, except the zero, which stays 0
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    z = np.random.default_rng(5).standard_normal(4)
    out = add_noise(X, "additive0", 100.0, np.random.default_rng(5))[:, 0]
    assert out[0] == 0.0
    assert np.allclose(out[1:], X[1:, 0] + 1.2909944487358056 * z[1:])
    # the other values get exactly additive's noise (same draws)
    assert np.array_equal(out[1:], add_noise(X, "additive", 100.0, np.random.default_rng(5))[1:, 0])


def test_correlated2_on_three_values_with_a_fixed_draw():
    # x = 1, 2, 3 (mean 2, sd 1), delta 0.6: d1 = sqrt(1 - .36) = 0.8; y ~ N((1 - .8)/.6 * 2 = 0.66667, 1);
    # x' = 0.8 x + 0.6 y = 0.8 x + 0.4 + 0.6 z  ->  1.2 + .6 z1, 2.0 + .6 z2, 2.8 + .6 z3
    X = np.array([[1.0], [2.0], [3.0]])
    z = np.random.default_rng(7).standard_normal(3)
    out = add_noise(X, "correlated2", 150.0, np.random.default_rng(7), delta=0.6)[:, 0]
    assert np.allclose(out, np.array([1.2, 2.0, 2.8]) + 0.6 * z)


def test_correlated2_keeps_means_and_variances_in_expectation_on_census():
    # Var(d1 x + delta sd z) over records and draws = d1^2 s^2 + delta^2 s^2 = s^2; the covariance of two
    # columns shrinks to d1^2 cov
    X = census()[["AGI", "FEDTAX"]].to_numpy(dtype=float)
    S = np.cov(X, rowvar=False)
    covs = np.array([np.cov(add_noise(X, "correlated2", 0, np.random.default_rng(s), delta=0.5), rowvar=False)
                     for s in range(100)])
    mean, se = covs.mean(axis=0), covs.std(axis=0, ddof=1) / np.sqrt(len(covs))
    target = np.array([[S[0, 0], 0.75 * S[0, 1]], [0.75 * S[1, 0], S[1, 1]]])
    assert (np.abs(mean - target) <= 4 * se).all()


@pytest.mark.parametrize("n, noise, expected", [
    (3, 150.0, np.sqrt(0.05)),      # n < 500: sqrt((3 - 1 - 1.5) / (4 * 2.5)) = sqrt(.5 / 10) = 0.223607
    (499, 100.0, np.sqrt(0.497)),   # n < 500: sqrt((499 - 1 - 1) / (500 * 2)) = sqrt(497 / 1000) = 0.704982
    (500, 100.0, np.sqrt(499 / 999)),  # n >= 500: sqrt((500 - 1) / (500 + 500 - 1)) = 0.706753
    (1000, 50.0, np.sqrt(999 / 1499)),  # sqrt(999 / (1000 + 500 - 1)) = 0.816363
])
def test_restr_factor_has_both_of_sdcmicros_formulas(n, noise, expected):
    assert nm.restr_factor(n, noise) == pytest.approx(expected, rel=1e-12)
    assert abs(nm.restr_factor(3, 150.0) - 0.2236068) < 1e-7


def test_restr_is_the_correlated_noise_shrunk_to_the_mean():
    # z = c (x + e) + (1 - c) mean(x), e the correlated draw: with the same seed, c * correlated + (1 - c) mean
    X = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 7.0], [5.0, 1.0]])
    c = nm.restr_factor(4, 50.0)  # sqrt((4 - 1 - .5) / (5 * 1.5)) = sqrt(2.5 / 7.5) = 0.57735
    assert c == pytest.approx(np.sqrt(1 / 3))
    corr = add_noise(X, "correlated", 50.0, np.random.default_rng(3))
    assert np.allclose(add_noise(X, "restr", 50.0, np.random.default_rng(3)), c * corr + (1 - c) * X.mean(axis=0))


def test_restr_expected_covariance_on_census():
    # E cov(z) = c^2 (cov(x) + cov(e)) = c^2 (1 + w) S: the mean over 200 seeds within 4 standard errors, entry
    # by entry; n = 1080 >= 500, w = 0.5: c^2 (1 + w) = 1079 * 1.5 / (1620 - 1) = 0.99969
    X = census()[["AGI", "FEDTAX", "PTOTVAL"]].to_numpy(dtype=float)
    n, w = len(X), 0.5
    c = nm.restr_factor(n, 50.0)
    assert c ** 2 * (1 + w) == pytest.approx((n - 1) * 1.5 / (n * 1.5 - 1))
    S = np.cov(X, rowvar=False)
    covs = np.array([np.cov(add_noise(X, "restr", 50.0, np.random.default_rng(s)), rowvar=False)
                     for s in range(200)])
    mean, se = covs.mean(axis=0), covs.std(axis=0, ddof=1) / np.sqrt(len(covs))
    assert (np.abs(mean - c ** 2 * (1 + w) * S) <= 4 * se + 1e-9 * np.abs(S).max()).all()


# -- ROMM ------------------------------------------------------------------------------------


def orthonormalization(u: np.ndarray) -> np.ndarray:
    """sdcMicro's ``orthonormalization(u, basis=TRUE, norm=TRUE)`` for a square invertible ``u``,
    line by line (classical Gram-Schmidt: each column minus its projections on the earlier
    *orthogonalized* columns, all of them then normalized)."""
    v = u.copy()
    n = u.shape[1]
    for i in range(1, n):
        prev = v[:, :i]
        coef = (u[:, i] @ prev) / np.diag(prev.T @ prev)
        v[:, i] = u[:, i] - prev @ coef
    return v / np.sqrt(np.diag(v.T @ v))


def test_gram_schmidt_is_sdcmicros_orthonormalization():
    P = np.eye(6) + 0.4 * np.random.default_rng(2).standard_normal((6, 6))
    T = nm.gram_schmidt(P)
    assert np.allclose(T, orthonormalization(P), atol=1e-12)
    assert np.allclose(T.T @ T, np.eye(6))
    # 2 x 2 by hand: P = [[1, 1], [0, 1]] -> columns e1 and (1, 1) - e1 = e2: T = I
    assert np.allclose(nm.gram_schmidt(np.array([[1.0, 1.0], [0.0, 1.0]])), np.eye(2))
    # P = [[0, 1], [1, 0]] is already orthonormal (R = I): T = P, no sign flipped
    assert np.allclose(nm.gram_schmidt(np.array([[0.0, 1.0], [1.0, 0.0]])), [[0, 1], [1, 0]])


def test_romm_with_one_block_is_sdcmicros_romm():
    # block_size >= n: sdcMicro's ROMM, T %*% x with T = orthonormalization(I + p M), M the n x n normals
    X = np.random.default_rng(0).normal(10, 3, size=(7, 2))
    M = np.random.default_rng(4).standard_normal((7, 7))
    expected = orthonormalization(np.eye(7) + 0.3 * M) @ X
    for b in (7, 50):
        assert np.allclose(add_noise(X, "ROMM", 0, np.random.default_rng(4), p=0.3, block_size=b), expected)


def test_romm_blocks_cover_the_records_in_order_the_remainder_in_the_last():
    assert nm.romm_blocks(10, 3) == [(0, 3), (3, 3), (6, 4)]   # 10 = 3 + 3 + 4: no block of one record
    assert nm.romm_blocks(9, 3) == [(0, 3), (3, 3), (6, 3)]
    assert nm.romm_blocks(5, 3) == [(0, 5)]
    assert nm.romm_blocks(5, 8) == [(0, 5)]


def test_romm_keeps_the_cross_products_of_every_block_on_census(monkeypatch):
    # 1080 records, block 100: blocks 0-99, ..., 800-899 and the last 900-1079; each block's X'X exactly, so the
    # whole table's too; chunks of 3 blocks, so the chunking is exercised
    monkeypatch.setattr(nm, "ROMM_CHUNK", 3 * 100 * 100)
    df = census()
    out = run({"columns": CENSUS_QI, "method": "ROMM", "p": 0.01, "block_size": 100}, census_table(), seed=3)
    X = df[CENSUS_QI].to_numpy(dtype=float)
    Y = out.data.to_pandas()[CENSUS_QI].to_numpy()
    bounds = list(range(0, 901, 100)) + [len(X)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        G = X[a:b].T @ X[a:b]
        assert np.allclose(Y[a:b].T @ Y[a:b], G, rtol=1e-10, atol=1e-10 * np.abs(G).max()), (a, b)
        # and each block mixes only its own records: its column sums of squares are kept
        assert np.allclose((Y[a:b] ** 2).sum(axis=0), (X[a:b] ** 2).sum(axis=0), rtol=1e-10)
    # the declared size: each value moves by about p sqrt(b - 1) times the block's root mean square
    rel = np.concatenate([(Y[a:b] - X[a:b]) / np.sqrt((X[a:b] ** 2).mean(axis=0))
                          for a, b in zip(bounds[:-2], bounds[1:-1])])
    assert abs(rel.std() / (0.01 * np.sqrt(99)) - 1) < 0.1


def test_romm_with_p_zero_changes_nothing():
    X = np.arange(12.0).reshape(6, 2)
    assert np.allclose(add_noise(X, "ROMM", 0, np.random.default_rng(1), p=0.0, block_size=2), X)


# -- outdect ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sample", [None, 300])
def test_outdect_changes_only_the_outliers_recomputed_independently(monkeypatch, sample):
    from scipy.stats import chi2
    from sklearn.covariance import MinCovDet

    X = census()[["AGI", "FEDTAX", "FICA"]].to_numpy(dtype=float)[:480]
    if sample:  # the MCD fitted on a seeded sample of 300 of the 480 records
        monkeypatch.setattr(nm, "MCD_SAMPLE", sample)
    out = add_noise(X, "outdect", 150.0, np.random.default_rng(9))
    # the outliers: a value above its column's 99 % quantile (pandas, R's type 7), or a robust distance from the
    # MCD (seeded with the generator's first integer) above sqrt(qchisq(.975, 3)) = 3.0575
    df = pd.DataFrame(X)
    univ = (df > df.quantile(0.99)).any(axis=1).to_numpy()
    seed = int(np.random.default_rng(9).integers(2 ** 31 - 1))
    fit = X
    if sample:
        fit = X[np.sort(np.random.default_rng(seed).choice(len(X), sample, replace=False))]
    mcd = MinCovDet(support_fraction=0.5, random_state=seed).fit(fit)
    D = X - mcd.location_
    rd = np.sqrt(np.einsum("ij,jk,ik->i", D, np.linalg.pinv(mcd.covariance_), D))
    assert np.sqrt(chi2.ppf(0.975, 3)) == pytest.approx(3.0575, abs=1e-4)
    flagged = univ | (rd > np.sqrt(chi2.ppf(0.975, 3)))
    assert 0 < flagged.sum() < len(X)
    moved = (out != X).any(axis=1)
    assert np.array_equal(moved, flagged)
    # the noise: sd 1.96 sd(x) / sqrt(n) * 1.5 per column
    z = (out[flagged] - X[flagged]) / (1.96 * X.std(axis=0, ddof=1) / np.sqrt(len(X)) * 1.5)
    assert 0.6 < z.std() < 1.4


# -- declaration, CLI, bad input ---------------------------------------------------------------


def test_declarations_of_the_new_methods():
    p = validate_params(Noise.params, {"columns": ["a"], "method": "ROMM", "p": 0.01, "block_size": 101})
    assert Noise().perturbs(p)["a"] == {
        "kind": "noise", "method": "ROMM", "rounded": False, "p": 0.01, "block_size": 101, "transform": "rotation",
        "blocks": "consecutive records in table order, the remainder joined to the last block",
        "approx_relative_perturbation": 0.1, "relative_to": "rms within block",
        "restored": ["cross-products within each block"], "columns": ["a"]}
    p = validate_params(Noise.params, {"columns": ["a"], "method": "correlated2", "delta": 0.6})
    d = Noise().perturbs(p)["a"]
    assert d["delta"] == 0.6 and d["shrink"] == pytest.approx(0.8) and "noise" not in d and "p" not in d
    p = validate_params(Noise.params, {"columns": ["a"], "method": "additive0", "noise": 20})
    assert Noise().perturbs(p)["a"] == {"kind": "noise", "method": "additive0", "noise": 20.0, "rounded": False,
                                        "distribution": "normal", "relative_sd": 0.2, "zeros_kept": True}
    p = validate_params(Noise.params, {"columns": ["a"], "method": "restr"})
    assert Noise().perturbs(p)["a"]["expected_covariance"] == "c^2 (1 + w) S"


def test_romm_workflow_is_reproducible_and_seeded(cli, tmp_path):
    a, b, c = repeat_runs(cli, tmp_path, """\
        perturbed:
          uses: noise
          input: typed
          with: {columns: [AGI, FEDTAX, PTOTVAL], method: ROMM, p: 0.05, block_size: 64}
        """)
    assert a == b
    assert a != c
    d = declared(tmp_path / "0.duckdb")
    assert set(d) == {"AGI", "FEDTAX", "PTOTVAL"} and d["AGI"]["block_size"] == 64 and d["AGI"]["p"] == 0.05
    pub = pd.read_csv(pd.io.common.BytesIO(a))
    X = census()[["AGI", "FEDTAX", "PTOTVAL"]].to_numpy(dtype=float)
    Y = pub[["AGI", "FEDTAX", "PTOTVAL"]].to_numpy(dtype=float)
    assert np.allclose(Y.T @ Y, X.T @ X, rtol=1e-9)  # the published order is another, X'X does not care
    assert np.array_equal(np.sort(pub["TAXINC"].to_numpy()), np.sort(census()["TAXINC"].to_numpy()))


@pytest.mark.parametrize("params, error", [
    ({"method": "ROMM", "p": -0.1}, "parameter 'p'"),
    ({"method": "ROMM", "block_size": 1}, "parameter 'block_size'"),
    ({"method": "correlated2", "delta": 0}, "parameter 'delta'"),
    ({"method": "correlated2", "delta": 1.5}, "parameter 'delta'"),
])
def test_bad_parameters_fail_in_one_line(params, error):
    with pytest.raises(ParamError, match=error):
        validate_params(Noise.params, {"columns": ["a"], **params})


def test_delta_one_is_refused_for_correlated2_only():
    t = typed_table({"x": [1.0, 2.0, 3.0]})
    with pytest.raises(InputError, match="parameter 'delta' must lie strictly between 0 and 1"):
        run({"columns": ["x"], "method": "correlated2", "delta": 1}, t)
    run({"columns": ["x"], "method": "additive", "delta": 1}, t)


def test_restr_refuses_a_noise_its_factor_cannot_take():
    # n = 3 < 500, noise 200 %: w = 2 = n - 1, c = sqrt(0 / ...) = 0 would publish the mean only
    t = typed_table({"x": [1.0, 2.0, 4.0]})
    with pytest.raises(InputError, match="method restr needs noise/100 below n - 1 .* n = 3, noise = 200"):
        run({"columns": ["x"], "method": "restr", "noise": 200}, t)
    run({"columns": ["x"], "method": "restr", "noise": 150}, t)


@pytest.mark.parametrize("with_, message", [
    ("{columns: [AGI], method: ROMM, p: -1}", "parameter 'p'"),
    ("{columns: [AGI], method: ROMM, block_size: 1}", "parameter 'block_size'"),
    ("{columns: [AGI], method: correlated2, delta: 1.5}", "parameter 'delta'"),
    ("{columns: [AGI], method: correlated2, delta: 1}", "parameter 'delta' must lie strictly between 0 and 1"),
])
def test_cli_refuses_bad_parameters_in_one_line(cli, tmp_path, with_, message):
    wf = workflow(tmp_path, f"""\
        perturbed:
          uses: noise
          input: typed
          with: {with_}
        """)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "o")
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.output
