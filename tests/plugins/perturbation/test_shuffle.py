"""The ``shuffle`` algorithm (data shuffling, sdcMicro's method "ds"): its formulas on hand-worked
arrays, its guarantees on the Census data checked with scipy.stats, the workflow run through the
CLI and bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from anonflow.errors import InputError
from anonflow.params import ParamError, validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.perturbation.shuffle import Shuffle, average_ranks, normal_scores, reverse_map, shuffle_model

from tests.plugins.perturbation.test_noise import census, census_table, declared, repeat_runs

CONFIDENTIAL = ["FEDTAX", "STATETAX", "FICA"]
GIVEN = ["AGI", "PEARNVAL", "INTVAL"]


def run(params, table, seed=0):
    plugin = Shuffle()
    params = validate_params(plugin.params, params)
    plugin.check(params, table=table)
    return plugin.run(table, params, make_context(seed=seed))


# -- formulas ----------------------------------------------------------------------------------


def test_normal_scores_of_ranks():
    # n = 4: (rank - 0.5) / 4 = .125 .375 .625 .875 -> qnorm = -1.15035, -0.31864, 0.31864, 1.15035;
    # tied ranks (2.5, 2.5) share one score, qnorm(.5) = 0
    assert np.allclose(normal_scores(np.array([[1.0], [2], [3], [4]]))[:, 0],
                       [-1.1503494, -0.3186394, 0.3186394, 1.1503494])
    assert np.allclose(normal_scores(np.array([[1.0], [2.5], [2.5], [4]]))[1:3, 0], [0, 0])


def test_model_from_spearman_correlations():
    # x ranks 1 2 3 4, s ranks 1 2 4 3: Spearman 1 - 6 * (0 + 0 + 1 + 1) / (4 * 15) = 0.8;
    # P = 2 sin(0.8 pi / 6) = 2 * 0.4067366 = 0.8134733; B = P_xs / P_ss = 0.8134733;
    # Sigma = 1 - 0.8134733^2 = 0.3382613
    B, Sigma = shuffle_model(np.array([[1.0, 1], [2, 2], [3, 4], [4, 3]]), 1)
    assert np.allclose(B, [[0.8134733]])
    assert np.allclose(Sigma, [[0.3382613]])


def test_model_with_two_given_columns():
    # the regression of x's scores on two given ones: B = P_xs P_ss^-1 and Sigma = P_xx - B P_sx, with P the
    # transformed Spearman matrix, here from scipy.stats.spearmanr (written out, not the code under test's corrcoef)
    rng = np.random.default_rng(0)
    M = rng.normal(size=(30, 3))
    M[:, 0] += M[:, 1] + 0.5 * M[:, 2]
    ranks = np.column_stack([stats.rankdata(M[:, j]) for j in range(3)])
    P = 2 * np.sin(np.pi * stats.spearmanr(M).statistic / 6)
    B, Sigma = shuffle_model(ranks, 1)
    expect = P[0, 1:] @ np.linalg.inv(P[1:, 1:])
    assert np.allclose(B[0], expect)
    assert np.allclose(Sigma[0, 0], 1 - expect @ P[1:, 0])


def test_average_ranks():
    # 10 20 20 5: 5 is rank 1, 10 rank 2, the two 20s share ranks 3 and 4: 3.5; sorted order 3 0 1 2
    ranks, order = average_ranks(np.array([10.0, 20, 20, 5]))
    assert ranks.tolist() == [2, 3.5, 3.5, 1]
    assert order.tolist() == [3, 0, 1, 2]
    x = np.random.default_rng(0).integers(0, 30, size=500).astype(float)  # many ties
    assert np.array_equal(average_ranks(x)[0], stats.rankdata(x, method="average"))


def test_reverse_map_gives_the_ranks_of_the_perturbed_values_to_the_original_values():
    # y: -1 (record 1) < 0.2 (record 0) < 3 (record 2): they take x's sorted values 1, 3, 5
    x = np.array([5.0, 1, 3])
    assert x[reverse_map(np.argsort(x), np.array([0.2, -1, 3]))].tolist() == [3, 1, 5]
    # tied y (records 0 and 2) are taken in record order: record 0 gets 1, record 2 gets 3, record 1 gets 5
    assert x[reverse_map(np.argsort(x), np.array([0.0, 7, 0]))].tolist() == [1, 5, 3]


def test_run_is_the_model_plus_the_generator_draw_reverse_mapped():
    # 6 records, x shuffled given s; the perturbed scores Y* = S* B + e with e the generator's first draw
    x = np.array([3.0, 9, 1, 7, 5, 11])
    s = np.array([2.0, 8, 1, 9, 4, 6])
    out = run({"columns": ["x"], "given": ["s"]}, typed_table({"x": x, "s": s}), seed=4).data
    ranks = np.column_stack([stats.rankdata(x), stats.rankdata(s)])
    B, Sigma = shuffle_model(ranks, 1)
    e = np.random.default_rng(4).multivariate_normal([0.0], Sigma, size=6, method="eigh")
    y = stats.norm.ppf((ranks[:, 1] - 0.5) / 6) * B[0, 0] + e[:, 0]
    expect = np.empty(6)
    expect[np.argsort(y)] = np.sort(x)
    assert out.column("x").to_numpy().tolist() == expect.tolist()
    assert out.column("s").to_numpy().tolist() == s.tolist()


# -- properties on the Census data -----------------------------------------------------------


def test_census_marginals_kept_and_rank_correlations_near_the_originals():
    df = census()
    out = run({"columns": CONFIDENTIAL, "given": GIVEN}, census_table(), seed=8).data.to_pandas()
    for c in CONFIDENTIAL:
        assert sorted(df[c].tolist()) == sorted(out[c].tolist()), c
        assert out[c].dtype == df[c].dtype
        assert (df[c] != out[c]).mean() > 0.5, c  # the values did move between records
    before = stats.spearmanr(df[CONFIDENTIAL + GIVEN]).statistic
    after = stats.spearmanr(out[CONFIDENTIAL + GIVEN]).statistic
    k = len(CONFIDENTIAL)
    # with the predictors, and among the shuffled columns: the normal copula's sampling error at n = 1080
    assert np.abs(after[:k, k:] - before[:k, k:]).max() < 0.06
    assert np.abs(after[:k, :k] - before[:k, :k]).max() < 0.06
    assert np.array_equal(out[GIVEN].to_numpy(), df[GIVEN].to_numpy())


def test_census_rank_correlations_are_kept_in_expectation():
    # the mean over 20 seeds of the shuffled table's Spearman matrix equals the original's within 4 standard
    # errors (a little slack for the ties of the Census incomes, whose normal scores are averaged)
    df = census()
    before = stats.spearmanr(df[CONFIDENTIAL + GIVEN]).statistic
    after = np.array([stats.spearmanr(run({"columns": CONFIDENTIAL, "given": GIVEN}, census_table(), seed=seed)
                                      .data.to_pandas()[CONFIDENTIAL + GIVEN]).statistic for seed in range(20)])
    mean, se = after.mean(axis=0), after.std(axis=0, ddof=1) / np.sqrt(len(after))
    k = len(CONFIDENTIAL)
    assert (np.abs(mean - before)[:k] <= 4 * se[:k] + 0.003).all()


def test_declaration():
    p = validate_params(Shuffle.params, {"columns": ["a", "b"], "given": ["s"]})
    assert Shuffle().perturbs(p) == {c: {"kind": "swap", "method": "shuffle", "variant": "ds",
                                         "columns": ["a", "b"], "given": ["s"], "correlation": "spearman"}
                                     for c in ("a", "b")}


def test_workflow_is_reproducible_and_seeded(cli, tmp_path):
    a, b, c = repeat_runs(cli, tmp_path, """\
        perturbed:
          uses: shuffle
          input: typed
          with: {columns: [FEDTAX, FICA], given: [AGI, PEARNVAL]}
        """)
    assert a == b
    assert a != c
    assert declared(tmp_path / "0.duckdb")["FICA"]["given"] == ["AGI", "PEARNVAL"]
    out = pd.read_csv(pd.io.common.BytesIO(a))
    assert sorted(out["FICA"]) == sorted(census()["FICA"])


def test_bad_parameters_fail_in_one_line():
    with pytest.raises(ParamError, match="parameter 'method'"):
        validate_params(Shuffle.params, {"columns": ["a"], "given": ["b"], "method": "mvn"})
    with pytest.raises(ParamError, match="parameter 'given'"):
        validate_params(Shuffle.params, {"columns": ["a"]})
    table = typed_table({"x": [1.0, 2, 3, 4], "y": [2.0, 1, 4, 3], "z": [2.0, 1, 4, 3], "c": [1.0, 1, 1, 1],
                         "s": ["a", "b", "c", "d"], "m": [1.0, None, 2, 3]})
    cases = (({"columns": ["x"], "given": ["x"]}, "'x' is both in 'columns' and in 'given'"),
             ({"columns": ["x"], "given": ["s"]}, "column 's' \\(given\\) .* not numbers"),
             ({"columns": ["x"], "given": ["q"]}, "'given' names 'q', which is not a column"),
             ({"columns": ["x"], "given": ["y", "z"]}, "'given' columns are collinear"),
             ({"columns": ["x"], "given": ["c"]}, "column 'c' is constant"),
             ({"columns": ["m"], "given": ["y"]}, "column 'm' has 1 missing value"))
    for params, message in cases:
        with pytest.raises(InputError, match=message):
            run(params, table)
    with pytest.raises(InputError, match="at least 3 records"):
        run({"columns": ["x"], "given": ["y"]}, typed_table({"x": [1.0, 2], "y": [2.0, 1]}))
