"""The ``noise`` algorithm (sdcMicro's addNoise: additive, correlated, exact-moments): formulas on
hand-computed arrays, properties on the Census data checked with numpy written here, the
workflow run through the CLI (byte-identical repeats, another seed differs) and bad input."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
import pytest

from anonflow.errors import InputError
from anonflow.params import ParamError, validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.perturbation.noise import Noise, add_noise, restore_moments, sym_sqrt

from tests.support.helpers import CENSUS_QI, DATA

CENSUS = DATA / "sdcmicro" / "CASCrefmicrodata.csv"


def census() -> pd.DataFrame:
    return pd.read_csv(CENSUS)


def census_table(columns=CENSUS_QI):
    df = census()
    return typed_table({c: df[c].to_numpy() for c in columns}, quasi={c: "continuous" for c in columns})


def run(params, table, seed=0):
    plugin = Noise()
    params = validate_params(plugin.params, params)
    plugin.check(params, table=table)
    return plugin.run(table, params, make_context(seed=seed))


# -- formulas on small arrays ------------------------------------------------------------------


def test_additive_is_the_column_plus_normal_noise_of_noise_percent_of_its_sd():
    # x = 1, 2, 3, 4: mean 2.5, sd (n - 1) = sqrt((2.25 + .25 + .25 + 2.25) / 3) = sqrt(5/3) = 1.29099;
    # noise 100 %: the noise sd is 1.29099, so x' = x + 1.29099 * z with z the generator's normals
    X = np.array([[1.0], [2.0], [3.0], [4.0]])
    out = add_noise(X, "additive", 100.0, np.random.default_rng(5))
    z = np.random.default_rng(5).standard_normal(4)
    assert np.allclose(out[:, 0], X[:, 0] + 1.2909944487358056 * z)
    # noise 50 %: half of it; noise 0: nothing moves
    assert np.allclose(add_noise(X, "additive", 50.0, np.random.default_rng(5))[:, 0], X[:, 0] + 0.6454972 * z)
    assert np.array_equal(add_noise(X, "additive", 0.0, np.random.default_rng(5)), X)


def test_additive_draws_each_column_with_its_own_sd():
    # columns (1, 2, 3) and (10, 20, 30): sds 1 and 10, so with noise 200 % the noise sds are 2 and 20,
    # drawn column after column (3 normals, then 3 more)
    X = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    z = np.random.default_rng(1).standard_normal(6)
    out = add_noise(X, "additive", 200.0, np.random.default_rng(1))
    assert np.allclose(out[:, 0], X[:, 0] + 2 * z[:3])
    assert np.allclose(out[:, 1], X[:, 1] + 20 * z[3:])


def test_correlated_noise_has_noise_percent_of_the_covariance():
    # x1 = 1, 2, 3 (var 1); x2 = 2, 4, 7: mean 13/3, deviations -7/3, -1/3, 8/3, var (49 + 1 + 64)/9/2 = 57/9;
    # cov = ((-1)(-7/3) + 0 + (1)(8/3)) / 2 = 2.5.  noise 50 %: the noise covariance is 0.5 * S, drawn as
    # 0.5 * R (R the correlation matrix: 2.5 / sqrt(57/9) = 0.99340) and each column times its sd (1, 2.51661)
    X = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 7.0]])
    sd = np.array([1.0, np.sqrt(57 / 9)])
    r = 2.5 / np.sqrt(57 / 9)
    assert abs(r - 0.9933993) < 1e-7
    R = np.array([[1.0, r], [r, 1.0]])
    E = np.random.default_rng(2).multivariate_normal([0, 0], 0.5 * R, size=3, method="eigh") * sd
    assert np.allclose(add_noise(X, "correlated", 50.0, np.random.default_rng(2)), X + E)
    assert np.allclose(np.outer(sd, sd) * R, [[1.0, 2.5], [2.5, 57 / 9]])


def test_symmetric_square_roots():
    # diag(4, 9): root diag(2, 3), inverse root diag(1/2, 1/3); the rank-1 matrix [[1, 1], [1, 1]] = 2 v v'
    # (v = (1, 1)/sqrt 2) has root sqrt(2) v v' = [[.7071, .7071], ...] and pseudo-inverse root v v'/sqrt 2
    assert np.allclose(sym_sqrt(np.diag([4.0, 9.0])), np.diag([2.0, 3.0]))
    assert np.allclose(sym_sqrt(np.diag([4.0, 9.0]), inverse=True), np.diag([0.5, 1 / 3]))
    ones = np.ones((2, 2))
    assert np.allclose(sym_sqrt(ones), ones / np.sqrt(2))
    assert np.allclose(sym_sqrt(ones, inverse=True), ones / 2 / np.sqrt(2))


def test_restore_moments_gives_the_mean_and_covariance_of_the_original():
    # one column: x = 1, 2, 3 (mean 2, sd 1); z = 0, 4, 2 (mean 2, sd 2) -> 2 + (z - 2) * 1/2 = 1, 3, 2
    assert np.allclose(restore_moments(np.array([[0.0], [4.0], [2.0]]), np.array([[1.0], [2.0], [3.0]]))[:, 0],
                       [1.0, 3.0, 2.0])
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 3)) @ np.array([[1, 0.5, 0], [0, 1, 0.3], [0, 0, 2.0]])
    Y = restore_moments(X + rng.normal(size=(50, 3)), X)
    assert np.allclose(Y.mean(axis=0), X.mean(axis=0))
    assert np.allclose(np.cov(Y, rowvar=False), np.cov(X, rowvar=False))


def test_exact_moments_keeps_the_covariance_of_columns_of_very_different_sizes():
    # an income-like column (sd 1e6) beside a share (sd 1e-3): variances 1e12 and 1e-6, 18 orders apart; the
    # share's variance must be restored too (it is no rounding noise of the income's)
    rng = np.random.default_rng(6)
    X = np.column_stack([rng.normal(5e6, 1e6, 200), rng.normal(0.5, 1e-3, 200)])
    X[:, 1] += 1e-10 * X[:, 0]
    Y = add_noise(X, "exact-moments", 100.0, np.random.default_rng(1))
    Sx, Sy = np.cov(X, rowvar=False), np.cov(Y, rowvar=False)
    assert np.allclose(Sy, Sx, rtol=1e-9, atol=0)
    assert np.allclose(Y.mean(axis=0), X.mean(axis=0), rtol=1e-12)


def test_exact_moments_keeps_an_exact_linear_relation_between_columns():
    # x3 = x1 + x2 exactly: the covariance is singular, the noise lies in its span, and so does the result
    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 2))
    X = np.column_stack([X, X.sum(axis=1)])
    Y = add_noise(X, "exact-moments", 150.0, np.random.default_rng(0))
    assert np.allclose(Y[:, 2], Y[:, 0] + Y[:, 1])
    assert np.allclose(np.cov(Y, rowvar=False), np.cov(X, rowvar=False))
    assert not np.allclose(Y, X)


# -- properties on the Census data -----------------------------------------------------------


@pytest.mark.parametrize("noise", [150.0, 20.0])
def test_additive_noise_has_the_declared_sd_on_census(noise):
    df = census()
    out = run({"columns": CENSUS_QI, "method": "additive", "noise": noise}, census_table(), seed=11).data.to_pandas()
    n = len(df)
    for c in CENSUS_QI:
        x = df[c].to_numpy(dtype=float)
        d = out[c].to_numpy() - x
        target = noise / 100 * x.std(ddof=1)
        se = target / np.sqrt(2 * (n - 1))  # standard error of a normal sample's sd
        assert abs(d.std(ddof=1) - target) < 4 * se, c
        assert abs(d.mean()) < 4 * target / np.sqrt(n), c


def test_correlated_noise_preserves_the_covariance_in_expectation_on_census():
    # E cov(x + e) = S + c S = (1 + c) S (e independent of x, cov(e) = c S); the mean over seeds within 4 standard
    # errors, entry by entry, and the correlation matrix of the mean equal to the original's
    X = census()[CENSUS_QI].to_numpy(dtype=float)
    S = np.cov(X, rowvar=False)
    c = 0.5
    covs = np.array([np.cov(add_noise(X, "correlated", 100 * c, np.random.default_rng(seed)), rowvar=False)
                     for seed in range(200)])
    mean, se = covs.mean(axis=0), covs.std(axis=0, ddof=1) / np.sqrt(len(covs))
    assert (np.abs(mean - (1 + c) * S) <= 4 * se + 1e-9 * np.abs(S).max()).all()
    d = np.sqrt(np.diag(mean))
    corr = np.corrcoef(X, rowvar=False)
    assert np.abs(mean / np.outer(d, d) - corr).max() < 0.01


def test_exact_moments_keeps_means_and_covariance_exactly_on_census():
    df = census()
    out = run({"columns": CENSUS_QI, "method": "exact-moments", "noise": 150}, census_table(), seed=5).data.to_pandas()
    X, Y = df[CENSUS_QI].to_numpy(dtype=float), out[CENSUS_QI].to_numpy()
    scale = np.abs(np.cov(X, rowvar=False)).max()
    assert np.abs(Y.mean(axis=0) - X.mean(axis=0)).max() < 1e-6 * np.abs(X).max()
    assert np.abs(np.cov(Y, rowvar=False) - np.cov(X, rowvar=False)).max() < 1e-9 * scale
    # and the values did move: by about the noise's size (the correlated noise, then shrunk)
    assert (np.abs(Y - X).mean(axis=0) > 0.1 * X.std(axis=0)).all()


def test_output_is_float_every_record_its_own_class_other_columns_untouched():
    df = census()
    out = run({"columns": ["AGI", "FEDTAX"], "method": "correlated", "noise": 10}, census_table(), seed=1)
    data = out.data
    assert str(data.schema.field("AGI").type) == "double"  # the source column holds integers
    assert str(data.schema.field("PTOTVAL").type) == "int64"
    assert np.array_equal(data.column("_class").to_numpy(), np.arange(len(df)))
    assert np.array_equal(data.column("PTOTVAL").to_numpy(), df["PTOTVAL"].to_numpy())
    assert np.array_equal(data.column("_row").to_numpy(), np.arange(len(df)))


def test_declaration():
    p = validate_params(Noise.params, {"columns": ["a", "b"]})
    assert Noise().perturbs(p) == {
        c: {"kind": "noise", "method": "additive", "noise": 150.0, "rounded": False, "distribution": "normal",
            "relative_sd": 1.5} for c in ("a", "b")}
    p = validate_params(Noise.params, {"columns": ["a", "b"], "method": "exact-moments", "noise": 20})
    assert Noise().perturbs(p)["a"] == {"kind": "noise", "method": "exact-moments", "noise": 20.0, "rounded": False,
                                        "distribution": "multivariate normal", "relative_covariance": 0.2,
                                        "restored": ["mean", "covariance"], "columns": ["a", "b"]}


# -- through the CLI -----------------------------------------------------------------------


def workflow(tmp_path, step: str, name: str = "wf.yaml"):
    """A Census workflow in ``tmp_path`` (absolute path to the shipped data) with ``step`` (YAML
    of one step named ``perturbed``, input ``typed``) published as CSV."""
    text = textwrap.dedent(f"""\
        name: pert-test
        seed: 11
        sources:
          census: {{path: {CENSUS}}}
        steps:
          typed:
            uses: typing
            input: census
            with:
              quasi: [{", ".join(CENSUS_QI)}]
        """) + textwrap.indent(textwrap.dedent(step), "  ") + textwrap.indent(textwrap.dedent("""\
        out:
          uses: publish
          input: perturbed
          with: {publisher: csv, path: out.csv}
        """), "  ")
    path = tmp_path / name
    path.write_text(text)
    return path


def declared(db) -> dict:
    """What the step ``perturbed`` declared, as the engine recorded it in the store ``db``."""
    import json

    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        summary = con.sql("SELECT summary FROM af_step_runs WHERE step = 'perturbed'").fetchall()[0][0]
    return json.loads(summary)["perturbs"]


def repeat_runs(cli, tmp_path, step: str) -> tuple[bytes, bytes, bytes]:
    """The published CSV of two runs with the workflow's seed and one with another seed (their
    stores are ``tmp_path/0.duckdb`` ... ``2.duckdb``)."""
    wf = workflow(tmp_path, step)
    outs = []
    for i, seed in enumerate((None, None, 12)):
        args = ["run", wf, "--db", tmp_path / f"{i}.duckdb", "--out-dir", tmp_path / f"o{i}", "--no-cache"]
        res = cli(*args, *(["--seed", seed] if seed is not None else []))
        assert res.exit_code == 0, res.output
        outs.append((tmp_path / f"o{i}" / "out.csv").read_bytes())
    return outs[0], outs[1], outs[2]


def test_workflow_is_reproducible_and_seeded(cli, tmp_path):
    a, b, c = repeat_runs(cli, tmp_path, """\
        perturbed:
          uses: noise
          input: typed
          with: {columns: [AGI, FEDTAX, PTOTVAL], method: correlated, noise: 50}
        """)
    assert a == b
    assert a != c
    assert declared(tmp_path / "0.duckdb") == {
        c: {"kind": "noise", "method": "correlated", "noise": 50.0, "rounded": False,
            "columns": ["AGI", "FEDTAX", "PTOTVAL"], "distribution": "multivariate normal",
            "relative_covariance": 0.5} for c in ("AGI", "FEDTAX", "PTOTVAL")}
    df = pd.read_csv(pd.io.common.BytesIO(a)).sort_values(["AFNLWGT", "EMCONTRB", "INTVAL"])
    src = census().sort_values(["AFNLWGT", "EMCONTRB", "INTVAL"])
    assert np.array_equal(df["TAXINC"].to_numpy(), src["TAXINC"].to_numpy())
    assert not np.array_equal(df["AGI"].to_numpy(), src["AGI"].to_numpy())


# -- bad input -----------------------------------------------------------------------------


def test_bad_parameters_fail_in_one_line():
    with pytest.raises(ParamError, match="parameter 'method'"):
        validate_params(Noise.params, {"columns": ["a"], "method": "Romm"})
    with pytest.raises(ParamError, match="parameter 'noise'"):
        validate_params(Noise.params, {"columns": ["a"], "noise": -1})
    with pytest.raises(ParamError, match="parameter 'columns'"):
        validate_params(Noise.params, {"columns": "AGI"})
    table = typed_table({"x": [1.0, 2.0, 3.0], "s": ["a", "b", "c"], "m": [1.0, None, 2.0]})
    for columns, message in ((["y"], "'y', which is not a column"), (["s"], "column 's' .* not numbers"),
                             ([], "'columns' is empty"), (["x", "x"], "names 'x' twice")):
        with pytest.raises(InputError, match=message):
            run({"columns": columns}, table)
    with pytest.raises(InputError, match="column 'm' has 1 missing value"):
        run({"columns": ["m"]}, table)
    with pytest.raises(InputError, match="at least 2 records"):
        run({"columns": ["x"]}, typed_table({"x": [1.0]}))


@pytest.mark.parametrize("with_, message", [
    ("{columns: [AGI, NOPE]}", "'columns' names 'NOPE', which is not a column"),
    ("{columns: [AGI], noise: -5}", "parameter 'noise'"),
    ("{columns: [AGI], method: romm}", "parameter 'method'"),
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


def test_without_columns_the_continuous_quasi_identifiers_are_noised_and_declared():
    from anonflow_std.perturbation.rank_swap import RankSwap

    t = typed_table({"a": [1.0, 2.0, 3.0, 4.0], "b": [5.0, 1.0, 2.0, 8.0], "c": ["x", "y", "x", "y"],
                     "d": [1.0, 1.0, 2.0, 3.0]}, quasi={"a": "continuous", "b": "continuous", "c": "nominal"})
    p = validate_params(Noise.params, {"noise": 10})
    assert list(Noise().perturbs(p, t)) == ["a", "b"]
    out = run({"noise": 10}, t, seed=1).data.to_pandas()
    assert (out["a"] != [1.0, 2.0, 3.0, 4.0]).all() and out["d"].tolist() == [1.0, 1.0, 2.0, 3.0]
    assert list(RankSwap().perturbs(validate_params(RankSwap.params, {"p": 50}), t)) == ["a", "b"]
    none = typed_table({"c": ["x", "y"]}, quasi={"c": "nominal"})
    with pytest.raises(InputError, match="noise: the table has no continuous quasi-identifier; name the numeric "
                                         "columns to change with 'columns: \\[...\\]'"):
        run({"noise": 10}, none, seed=1)
