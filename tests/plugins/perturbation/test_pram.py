"""PRAM (``pram``): sdcMicro's invariant transition matrix checked on hand-computed toys and
against a literal transcription of R/pram.R's loops, its invariance on Adult checked as the mean
over 200 seeds with pandas, its realised retention against the recorded matrices, strata, linked
("ghost") columns, explicit matrices, bad parameters, and a CLI workflow run twice byte for byte."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from anonflow.api import Attribute, Typing, TypedTable
from anonflow.errors import InputError
from anonflow.params import validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.perturbation.pram import Pram, base_matrix, draw_codes, invariant_matrix

from tests.support import data
from tests.support.helpers import DATA

PRAM = Pram()
COLUMNS = ["occupation", "education", "marital-status"]


def run(table, seed=0, **params):
    ctx = make_context(seed=seed)
    p = validate_params(PRAM.params, params)
    PRAM.check(p, table=table)
    return PRAM.run(table, p, ctx), ctx


@pytest.fixture(scope="module")
def adult():
    """Adult's three categorical QIs (nominal), with education-num and sex beside them."""
    t = data.adult_full()
    return typed_table({c: t.column(c) for c in [*COLUMNS, "education-num", "sex"]},
                       quasi={c: "nominal" for c in COLUMNS})


@pytest.fixture(scope="module")
def sample(adult):
    """A sample of 3,000 Adult records (fixed seed), for the many-seed tests."""
    idx = np.sort(np.random.default_rng(1).choice(adult.num_rows, 3000, replace=False))
    t = adult.data.take(pa.array(idx)).drop_columns(["_row"])
    return typed_table({c: t.column(c) for c in t.column_names}, quasi={c: "nominal" for c in COLUMNS})


# -- the matrices by hand ----------------------------------------------------------------------

def test_invariant_matrix_two_categories_by_hand():
    # p = (0.75, 0.25); P's diagonal (0.8, 0.6), so P = [[0.8, 0.2], [0.4, 0.6]]
    P = base_matrix(np.array([0.8, 0.6]))
    assert np.allclose(P, [[0.8, 0.2], [0.4, 0.6]])
    # s = p'P = (0.75*0.8 + 0.25*0.4, 0.75*0.2 + 0.25*0.6) = (0.7, 0.3)
    # Q[k, j] = P[j, k] p_j / s_k: Q = [[0.6/0.7, 0.1/0.7], [0.15/0.3, 0.15/0.3]] = [[6/7, 1/7], [1/2, 1/2]]
    # R = P Q = [[0.8*6/7 + 0.2/2, 0.8/7 + 0.2/2], [0.4*6/7 + 0.6/2, 0.4/7 + 0.6/2]] = [[11/14, 3/14], [9/14, 5/14]]
    R = invariant_matrix(np.array([0.75, 0.25]), P, alpha=1.0)
    assert np.allclose(R, [[11 / 14, 3 / 14], [9 / 14, 5 / 14]])
    # p'R = (0.75*11/14 + 0.25*9/14, ...) = (10.5/14, 3.5/14) = p
    assert np.allclose(np.array([0.75, 0.25]) @ R, [0.75, 0.25])
    # Rs = 0.5 R + 0.5 I = [[25/28, 3/28], [9/28, 19/28]]
    Rs = invariant_matrix(np.array([0.75, 0.25]), P, alpha=0.5)
    assert np.allclose(Rs, [[25 / 28, 3 / 28], [9 / 28, 19 / 28]])


def test_base_matrix_three_categories_by_hand():
    # diagonal (0.8, 0.9, 1.0): each row's rest split over the two other categories
    assert np.allclose(base_matrix(np.array([0.8, 0.9, 1.0])),
                       [[0.8, 0.1, 0.1], [0.05, 0.9, 0.05], [0.0, 0.0, 1.0]])
    assert np.array_equal(base_matrix(np.array([0.3])), [[1.0]])  # one category: nothing to move to


def sdcmicro_rs(p, pds, alpha):
    """R/pram.R's calcTransitionMatrix, loop for loop (given the drawn diagonal ``pds``)."""
    L = len(p)
    P = np.empty((L, L))
    tri = (1 - pds) / (L - 1)
    for i in range(L):
        P[i, :] = tri[i]
    for i in range(L):
        P[i, i] = pds[i]
    Qest = P.copy()
    for k in range(L):
        s = sum(p[j] * P[j, k] for j in range(L))
        for j in range(L):
            Qest[k, j] = P[j, k] * p[j] / s
    R = P @ Qest
    return alpha * R + (1 - alpha) * np.eye(L)


@pytest.mark.parametrize("L", [3, 7, 16])
def test_invariant_matrix_equals_sdcmicros_loops(L):
    rng = np.random.default_rng(L)
    p = rng.dirichlet(np.ones(L))
    pds = rng.uniform(0.6, 1.0, L)
    ours = invariant_matrix(p, base_matrix(pds), 0.3)
    assert np.allclose(ours, sdcmicro_rs(p, pds, 0.3), atol=1e-13)
    assert np.allclose(ours.sum(axis=1), 1) and (ours >= 0).all()
    assert np.allclose(p @ ours, p)


def test_a_category_nobody_reaches_gets_no_records():
    # frequencies (0.5, 0.5, 0): column 3 of Rs is 0 outside its own row; its row is unused but sums to 1
    Rs = invariant_matrix(np.array([0.5, 0.5, 0.0]), base_matrix(np.array([0.8, 0.8, 1.0])), 0.5)
    assert np.allclose(Rs[:2, 2], 0) and np.allclose(Rs.sum(axis=1), 1)


def test_draw_codes_is_the_inverse_cdf_by_hand():
    # one row (0.2, 0.3, 0.5): cumulative (0.2, 0.5, 1.0); u -> first category whose cumulative exceeds u
    M = np.array([[0.2, 0.3, 0.5]])
    u = np.array([0.1, 0.2, 0.49, 0.5, 0.999])
    got = draw_codes(np.zeros(5, dtype=np.int64), np.zeros(5, dtype=np.int64), M, u)
    assert got.tolist() == [0, 1, 1, 2, 2]
    # a category of probability 0 is never drawn: (0.5, 0, 0.5) has cumulative (0.5, 0.5, 1)
    got = draw_codes(np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64), np.array([[0.5, 0.0, 0.5]]),
                     np.array([0.0, 0.4999, 0.5]))
    assert got.tolist() == [0, 0, 2]
    # rows select the matrix: row 1 = (0, 0, 1) sends everything to category 2; code -1 stays
    M = np.array([[1.0, 0, 0], [0, 0, 1.0]])
    got = draw_codes(np.array([0, 1, -1]), np.array([1, 1, 0]), M, np.array([0.3, 0.9, 0.5]))
    assert got.tolist() == [2, 2, -1]


# -- invariance and retention on Adult ------------------------------------------------------------

def frequencies(df, column, categories):
    return df[column].value_counts().reindex(categories, fill_value=0).to_numpy(dtype=float)


@pytest.mark.parametrize("invariant", [True, False])
def test_mean_frequencies_over_200_seeds_equal_the_original(sample, invariant):
    """The expected frequencies after invariant PRAM are the original's: the mean over 200 seeds
    is within 4 standard errors of them, per category of each column (counted with pandas).
    Without the invariant matrix (P itself) they drift by far more: the test bites."""
    original = sample.data.to_pandas()
    cats = {c: sorted(original[c].unique()) for c in COLUMNS}
    counts = {c: [] for c in COLUMNS}
    for seed in range(200 if invariant else 50):  # the drift without invariance shows in far fewer
        out, _ = run(sample, seed=seed, pd=0.6, invariant=invariant)
        df = out.data.select(COLUMNS).to_pandas()
        for c in COLUMNS:
            counts[c].append(frequencies(df, c, cats[c]))
    worst = 0.0
    for c in COLUMNS:
        f = np.array(counts[c])                      # (200, categories)
        se = f.std(axis=0, ddof=1) / np.sqrt(len(f))
        z = np.abs(f.mean(axis=0) - frequencies(original, c, cats[c])) / np.maximum(se, 1e-9)
        worst = max(worst, float(z.max()))
    print(f"invariant={invariant}: largest |mean - original| = {worst:.2f} standard errors")
    if invariant:
        assert worst < 4, worst
    else:
        assert worst > 20, worst


def test_realised_retention_is_the_recorded_diagonal_and_p_is_invariant(adult):
    out, ctx = run(adult, seed=11, pd=0.7, alpha=0.8)
    fitted = ctx.fitted["pram"]
    before, after = adult.data.to_pandas(), out.data.to_pandas()
    for c in COLUMNS:
        cats = fitted[c]["categories"]
        assert cats == sorted(before[c].unique())
        (Rs,) = np.array(fitted[c]["matrices"])
        p = frequencies(before, c, cats) / len(before)
        assert np.allclose(Rs.sum(axis=1), 1) and (Rs >= 0).all()
        assert np.allclose(p @ Rs, p, atol=1e-12)                       # p' Rs = p'
        kept = (before[c] == after[c]).groupby(before[c]).agg(["mean", "size"]).reindex(cats)
        d = np.diag(Rs)
        se = np.sqrt(d * (1 - d) / kept["size"].to_numpy())
        z = np.abs(kept["mean"].to_numpy() - d) / np.maximum(se, 1e-9)
        assert z.max() < 4.5, (c, z.max())
        share = float((before[c] != after[c]).mean())
        assert any(n.startswith(f"pram {c!r}: {int((before[c] != after[c]).sum())} of") for n in ctx.notes), share


def test_fixed_diagonal_uses_pd_exactly_without_invariance(adult):
    out, ctx = run(adult, seed=2, columns=["marital-status"], pd=0.9, diagonal="fixed", invariant=False)
    (P,) = np.array(ctx.fitted["pram"]["marital-status"]["matrices"])
    L = P.shape[0]
    assert np.allclose(np.diag(P), 0.9) and np.allclose(P[~np.eye(L, dtype=bool)], 0.1 / (L - 1))
    kept = float((adult.data.column("marital-status").to_numpy(zero_copy_only=False)
                  == out.data.column("marital-status").to_numpy(zero_copy_only=False)).mean())
    assert abs(kept - 0.9) < 4 * np.sqrt(0.09 / adult.num_rows)


@pytest.mark.parametrize("extra", [{}, {"invariant": False}, {"diagonal": "fixed"}, {"strata": ["sex"]}])
def test_pd_one_changes_nothing(sample, extra):
    out, ctx = run(sample, seed=5, pd=1.0, **extra)
    for c in COLUMNS:
        assert out.data.column(c).equals(sample.data.column(c))
        assert any(n.startswith(f"pram {c!r}: 0 of 3000 values changed") for n in ctx.notes)


def test_matrices_are_recorded_only_when_asked_and_small():
    _, ctx = run(toy(), record_matrices=False)
    assert ctx.fitted == {}
    many = typed_table({"x": [f"v{i}" for i in range(51)]}, quasi={"x": "nominal"})
    _, ctx = run(many)
    assert ctx.fitted == {} and ctx.notes == ["pram: no 'columns' given: randomized the nominal quasi-identifiers x",
                                              "pram 'x': " + ctx.notes[1].split(": ", 1)[1]]
    assert ctx.notes[1].endswith("; 51 categories")


def test_strata_get_their_own_invariant_matrices(adult):
    out, ctx = run(adult, seed=4, columns=["occupation"], strata=["sex"])
    fit = ctx.fitted["pram"]["occupation"]
    assert fit["strata"] == [["Female"], ["Male"]]
    df = adult.data.to_pandas()
    for (sex,), Rs in zip(fit["strata"], np.array(fit["matrices"])):
        p = frequencies(df[df.sex == sex], "occupation", fit["categories"])
        p /= p.sum()
        assert np.allclose(p @ Rs, p, atol=1e-12)
    # the stratum column is untouched and each record's stratum the same
    assert out.data.column("sex").equals(adult.data.column("sex"))


def test_linked_columns_change_with_their_column(adult):
    """education-num is a function of education: after PRAM with the link it still is, the
    records whose education changed took the new category's number, the others kept theirs."""
    out, ctx = run(adult, seed=8, columns=["education"], linked={"education": ["education-num", "sex"]},
                   strata=None)
    before, after = adult.data.to_pandas(), out.data.to_pandas()
    number = dict(zip(before["education"], before["education-num"]))
    assert (after["education"].map(number) == after["education-num"]).all()
    changed = before["education"] != after["education"]
    assert changed.sum() > 1000
    same = ~changed
    assert (after.loc[same, "education-num"] == before.loc[same, "education-num"]).all()
    assert (after.loc[same, "sex"] == before.loc[same, "sex"]).all()
    # sex is not a function of education: each changed record's (education, sex) is an original pair
    pairs = set(zip(before["education"], before["sex"]))
    assert all(pair in pairs for pair in zip(after.loc[changed, "education"], after.loc[changed, "sex"]))
    assert any("linked column(s) education-num, sex" in n for n in ctx.notes)


def test_linked_donors_come_from_the_stratum(adult):
    out, _ = run(adult, seed=9, columns=["occupation"], strata=["sex"], linked={"occupation": ["education"]})
    before, after = adult.data.to_pandas(), out.data.to_pandas()
    triples = set(zip(before["sex"], before["occupation"], before["education"]))
    changed = before["occupation"] != after["occupation"]
    assert all(t in triples for t in zip(after.loc[changed, "sex"], after.loc[changed, "occupation"],
                                         after.loc[changed, "education"]))


# -- explicit matrices, missing values, declarations ------------------------------------------------

def toy(values=("a", "b", "a", "c", "b", "a"), missing="error"):
    data = pa.table({"_row": pa.array(np.arange(len(values)), pa.int64()), "x": pa.array(list(values))})
    return TypedTable(data, Typing((Attribute("x", "quasi", "nominal"),), missing))


def test_explicit_matrix_is_used_as_given():
    swap = {"a": {"b": 1.0}, "b": {"a": 1}, "c": {"c": 1.0}}
    out, ctx = run(toy(), matrix={"x": swap})
    assert out.data.column("x").to_pylist() == ["b", "a", "b", "c", "a", "b"]
    assert ctx.fitted["pram"]["x"]["matrices"] == [[[0, 1, 0], [1, 0, 0], [0, 0, 1]]]
    assert PRAM.perturbs(validate_params(PRAM.params, {"columns": ["x"], "matrix": {"x": swap}})) == {
        "x": {"kind": "randomize", "method": "pram", "matrix": {"a": {"b": 1.0}, "b": {"a": 1.0}, "c": {"c": 1.0}},
              "strata": []}}


def test_sdcmicros_identity_matrix_example():
    """sdcMicro's test_pram.R: an identity matrix for one column changes nothing there, while
    the other column, pram'd by pd, changes."""
    t = typed_table({"roof": ["a", "b", "c"] * 40, "walls": ["x", "y"] * 60},
                    quasi={"roof": "nominal", "walls": "nominal"})
    identity = {"a": {"a": 1}, "b": {"b": 1}, "c": {"c": 1}}
    out, _ = run(t, seed=1, matrix={"roof": identity}, pd={"walls": 0.5})
    assert out.data.column("roof").equals(t.data.column("roof"))
    assert not out.data.column("walls").equals(t.data.column("walls"))


def test_the_missing_category_is_kept_and_never_drawn():
    values = ["a", "?", "b", "?"] * 50
    out, ctx = run(toy(values, missing="category"), pd=0.0, alpha=1.0, seed=3)
    got = out.data.column("x").to_pylist()
    assert [v for v, o in zip(got, values) if o == "?"] == ["?"] * 100
    assert "?" not in [v for v, o in zip(got, values) if o != "?"]
    assert ctx.fitted["pram"]["x"]["categories"] == ["a", "b"]


def test_integer_coded_categories_keep_their_type():
    t = typed_table({"x": [1, 2, 2, 3, 1, 1] * 20}, quasi={"x": "nominal"})
    out, _ = run(t, pd=0.5, seed=1)
    assert out.data.column("x").type == pa.int64()
    assert set(out.data.column("x").to_pylist()) <= {1, 2, 3}
    assert out.data.column("_class").to_pylist() == list(range(120))


def test_declaration_states_each_columns_parameters():
    p = validate_params(PRAM.params, {"columns": ["a", "b"], "pd": {"a": 0.9}, "alpha": 0.25, "strata": ["s"],
                                      "linked": {"b": ["b2"]}})
    assert PRAM.perturbs(p) == {
        "a": {"kind": "randomize", "method": "pram", "invariant": True, "pd": 0.9, "diagonal": "uniform",
              "alpha": 0.25, "strata": ["s"]},
        "b": {"kind": "randomize", "method": "pram", "invariant": True, "pd": 0.8, "diagonal": "uniform",
              "alpha": 0.25, "strata": ["s"], "linked": ["b2"]},
        "b2": {"kind": "randomize", "method": "pram", "linked_to": "b", "strata": ["s"]},
    }
    # without 'columns' the nominal quasi-identifiers, once the table is known
    t = typed_table({"u": ["x"], "v": ["y"], "w": [1.0]}, quasi={"u": "nominal", "v": "ordinal", "w": "continuous"})
    assert list(PRAM.perturbs(validate_params(PRAM.params, {}), t)) == ["u"]


BAD = [
    ({"columns": ["nope"]}, "column 'nope' (parameter 'columns') is not in the table"),
    ({"columns": ["n"]}, "column 'n' is typed continuous; type it nominal or ordinal"),
    ({"columns": ["x"], "pd": 1.5}, "parameter 'pd' = 1.5 for column 'x' is outside [0, 1]"),
    ({"columns": ["x"], "alpha": "lots"}, "parameter 'alpha' must be a number"),
    ({"columns": ["x"], "pd": {"y": 0.5}}, "parameter 'pd' names 'y', which is not one of the columns"),
    ({"columns": ["x"], "strata": ["x"]}, "column 'x' is both randomized and a stratum"),
    ({"columns": ["x"], "strata": ["zz"]}, "stratum column 'zz' (parameter 'strata') is not in the table"),
    ({"columns": ["x", "y"], "linked": {"x": ["n"], "y": ["n"]}}, "column 'n' is linked to both 'x' and 'y'"),
    ({"columns": ["x", "y"], "linked": {"x": ["y"]}}, "linked column 'y' is also randomized or a stratum"),
    ({"columns": ["x"], "linked": {"y": ["n"]}}, "parameter 'linked' names 'y', which is not one of the columns"),
    ({"columns": ["x"], "matrix": {"x": {"a": {"a": 0.5, "b": 0.4}, "b": {"b": 1}}}},
     "matrix row 'a' of column 'x' sums to 0.9, not 1"),
    ({"columns": ["x"], "matrix": {"x": {"a": {"a": -0.5, "b": 1.5}}}}, "is not a probability in [0, 1]"),
    ({"columns": ["x"], "matrix": {"x": {"a": {"a": 1}}}}, "matrix for column 'x' has no row for category 'b'"),
    ({"columns": ["x"], "matrix": {"x": {"a": {"q": 1}, "b": {"b": 1}}}}, "names 'q', which is not a category"),
    ({"columns": ["x"], "matrix": {"y": {"a": {"a": 1}}}}, "parameter 'matrix' names 'y'"),
]


@pytest.mark.parametrize("params, message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_parameters_are_one_line(params, message):
    t = typed_table({"x": ["a", "b", "a"], "y": ["c", "d", "d"], "n": [1.0, 2.0, 3.0]},
                    quasi={"x": "nominal", "y": "ordinal", "n": "continuous"})
    with pytest.raises(InputError) as err:
        run(t, **params)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_no_categorical_column_is_one_line():
    t = typed_table({"n": [1.0, 2.0]}, quasi={"n": "continuous"})
    with pytest.raises(InputError, match="pram needs categorical columns"):
        run(t)


# -- through the CLI --------------------------------------------------------------------------------

WORKFLOW = """\
name: pram-chain
seed: {seed}
sources:
  adult: {{path: {data}}}
steps:
  typed:
    uses: typing
    input: adult
    with:
      quasi: {{occupation: nominal, education: nominal, marital-status: nominal, age: continuous,
              capital-gain: continuous}}
      insensitive: [sex, education-num]
  sample:
    uses: sample
    input: typed
    with: {{n: 5000}}
  coded:
    uses: top-bottom-coding
    input: sample
    with: {{columns: {{capital-gain: {{top: 20000}}}}}}
  recoded:
    uses: global-recode
    input: coded
    with: {{columns: {{age: {{breaks: [0, 30, 50, 100]}}}}}}
  pramed:
    uses: pram
    input: recoded
    with: {{columns: [occupation, education], linked: {{education: [education-num]}}, strata: [sex]}}
  published:
    uses: publish
    input: pramed
    with: {{publisher: csv, path: out.csv}}
"""


def run_cli(cli, folder, *args):
    """The workflow (seed 3) run in ``folder`` (its store there too); ``args`` add options."""
    wf = folder / "wf.yaml"
    if not wf.exists():
        folder.mkdir()
        wf.write_text(WORKFLOW.format(seed=3, data=DATA / "adult" / "adult_full.csv"))
    out = folder / ("out" if not args else "other")
    res = cli("run", wf, "--db", folder / "s.duckdb", "--out-dir", out, "--json", *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.output), (out / "out.csv").read_bytes()


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """Runs a and b: the same workflow and seed in two stores; c: a's store with --seed 4 (the
    source and typing come from its cache, the seeded steps run again)."""
    from tests.support.helpers import cli_invoker
    from anonflow import registry as plugins

    plugins.set_registry(None)
    cli, root = cli_invoker(), tmp_path_factory.mktemp("pram-cli")
    return [(root / "a", *run_cli(cli, root / "a")), (root / "b", *run_cli(cli, root / "b")),
            (root / "a", *run_cli(cli, root / "a", "--seed", 4))]


def test_cli_runs_are_byte_identical_for_a_seed_and_differ_for_another(cli_runs):
    (_, _, a), (_, _, b), (_, _, c) = cli_runs
    assert a == b
    assert a != c
    df_a = pd.read_csv(pd.io.common.BytesIO(a))
    df_c = pd.read_csv(pd.io.common.BytesIO(c))
    # the recodes are deterministic, the sample and PRAM follow the seed: the records differ
    assert set(df_a["age"]) <= {"(0,30]", "(30,50]", "(50,100]"} and df_a["capital-gain"].max() <= 20000
    assert not df_a.equals(df_c)


def test_cli_records_every_steps_declaration(cli_runs):
    folder, result, _ = cli_runs[0]
    con = duckdb.connect(str(folder / "s.duckdb"), read_only=True)
    rows = dict(con.execute("SELECT step, summary FROM af_step_runs WHERE run_id = ?", [result["run_id"]]).fetchall())
    con.close()
    pramed = json.loads(rows["pramed"])
    assert pramed["perturbs"]["occupation"] == {"kind": "randomize", "method": "pram", "invariant": True, "pd": 0.8,
                                                "diagonal": "uniform", "alpha": 0.5, "strata": ["sex"]}
    assert pramed["perturbs"]["education-num"] == {"kind": "randomize", "method": "pram", "linked_to": "education",
                                                   "strata": ["sex"]}
    assert json.loads(rows["coded"])["perturbs"] == {
        "capital-gain": {"kind": "recode", "method": "top-bottom-coding", "top": 20000, "top_value": 20000}}
    assert json.loads(rows["recoded"])["perturbs"]["age"]["labels"] == ["(0,30]", "(30,50]", "(50,100]"]
    assert set(pramed["fitted"]["pram"]) == {"occupation", "education"}


@pytest.mark.parametrize("given, message", [
    ("pd: 2", "parameter 'pd' = 2 for column 'occupation' is outside [0, 1]"),
    ("diagonal: random", "diagonal"),
    ("matrix: {occupation: {a: {a: 0.5}}}", "matrix row 'a' of column 'occupation' sums to 0.5, not 1"),
])
def test_cli_bad_parameter_is_one_line_with_exit_code_2(cli, tmp_path, given, message):
    (tmp_path / "tiny.csv").write_text("occupation,sex\na,F\nb,M\na,M\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"""\
name: pram-bad
sources:
  tiny: {{path: tiny.csv}}
steps:
  typed: {{uses: typing, input: tiny, with: {{quasi: {{occupation: nominal}}, insensitive: [sex]}}}}
  pramed: {{uses: pram, input: typed, with: {{{given}}}}}
""")
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2, res.output
    assert res.output.startswith("Error: ") and res.output.count("\n") == 1
    assert message in res.output


def test_apply_of_a_pram_release_is_refused_in_one_line(cli, tmp_path):
    (tmp_path / "tiny.csv").write_text("occupation,sex\n" + "a,F\nb,M\na,M\n" * 5)
    wf = tmp_path / "wf.yaml"
    wf.write_text("""\
name: pram-release
sources:
  tiny: {path: tiny.csv}
steps:
  typed: {uses: typing, input: tiny, with: {quasi: {occupation: nominal}, insensitive: [sex]}}
  pramed: {uses: pram, input: typed}
  published: {uses: publish, input: pramed, with: {publisher: release, path: rel}}
""")
    assert cli("run", wf, "--db", tmp_path / "s.duckdb").exit_code == 0
    res = cli("apply", tmp_path / "out" / "rel", tmp_path / "tiny.csv")
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "the release was made by 'pram', which cannot be applied to new data" in res.output


def test_default_columns_are_declared_from_the_input(cli, tmp_path):
    # no `columns:`: pram changes the nominal quasi-identifiers, and the engine records those
    # (it hands perturbs() the step's input table)
    wf = tmp_path / "wf.yaml"
    text = WORKFLOW.format(seed=3, data=DATA / "adult" / "adult_full.csv")
    wf.write_text(text.split("  coded:")[0] + "  pramed: {uses: pram, input: sample}\n")
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    pramed = next(s for s in json.loads(res.output)["steps"] if s["step"] == "pramed")
    assert sorted(pramed["perturbs"]) == ["education", "marital-status", "occupation"]
    assert {w["kind"] for w in pramed["perturbs"].values()} == {"randomize"}


def test_a_column_of_too_many_categories_is_refused_before_its_matrices_are_built(monkeypatch):
    import anonflow_std.perturbation.pram as pram_module

    monkeypatch.setattr(pram_module, "MAX_MATRIX_CELLS", 8)  # 3 categories: 9 cells
    t = typed_table({"x": ["a", "b", "c", "a"]}, quasi={"x": "nominal"})
    with pytest.raises(InputError, match=r"pram: column 'x' has 3 categories: its transition matrices would hold 9 "
                                         r"cells \(at most 8\); PRAM is for categorical columns of few categories"):
        PRAM.run(t, validate_params(PRAM.params, {"columns": ["x"]}), make_context(seed=1))


def test_strata_whose_combinations_cannot_be_numbered_are_refused(monkeypatch):
    import anonflow_std.perturbation.pram as pram_module

    monkeypatch.setattr(pram_module, "MAX_STRATA_CODE", 8)  # (2 + 1) * (2 + 1) = 9 combinations
    t = typed_table({"x": ["a", "b", "a", "b"], "s": ["u", "v", "u", "v"], "r": ["p", "q", "q", "p"]},
                    quasi={"x": "nominal", "s": "nominal", "r": "nominal"})
    with pytest.raises(InputError, match=r"pram: the strata columns 's', 'r' have too many combinations of values"):
        PRAM.run(t, validate_params(PRAM.params, {"columns": ["x"], "strata": ["s", "r"]}), make_context(seed=1))
