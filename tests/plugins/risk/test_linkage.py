"""``dbrl`` (distance-based record linkage): hand-computed examples with ties (the arithmetic in
comments), an independent brute-force check (numpy's full distance matrix) on real and on
tie-heavy data, a check against the ``recordlinkage`` toolkit where it is installed, property
tests on sdcMicro's Census (itself 1, noise lower and monotone, MDAV in between) and one
workflow run through the CLI with ``interval-disclosure`` beside it."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anonflow.api import InputError
from anonflow.params import validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.microaggregation.mdav import Mdav
from anonflow_std.risk.linkage import Dbrl, link_credits, whiten
from tests.support import data
from tests.support.helpers import CENSUS_QI, census_workflow

# -- the definition, by hand ---------------------------------------------------------------


def test_ties_count_one_over_the_number_tied():
    Zo = np.array([[0.0], [1.0], [2.0], [4.0]])
    Zm = np.array([[0.5], [0.5], [3.0], [1.5]])
    # record 0 at 0.5: distances to 0, 1, 2, 4 are 0.5, 0.5, 1.5, 3.5: own (0) ties with 1 -> 1/2
    # record 1 at 0.5: the same distances, own (1) at 0.5 ties with 0 -> 1/2
    # record 2 at 3: distances 3, 2, 1, 1: own (2) at 1 ties with 4 -> 1/2
    # record 3 at 1.5: distances 1.5, 0.5, 0.5, 2.5: own (4) at 2.5 is not the nearest -> 0
    np.testing.assert_array_equal(link_credits(Zo, Zm), [0.5, 0.5, 0.5, 0.0])


def test_duplicate_originals_tie_by_their_number():
    # three originals at 0 and one at 5, published unchanged: each record at 0 is equally near to
    # the three originals at 0 -> 1/3 each; the one at 5 is its own unique nearest -> 1.
    # dbrl = (3 * 1/3 + 1) / 4 = 0.5
    Zo = np.array([[0.0], [0.0], [0.0], [5.0]])
    np.testing.assert_allclose(link_credits(Zo, Zo), [1 / 3, 1 / 3, 1 / 3, 1.0], rtol=1e-15)
    # a released value nearer to 0 than to 5 but not at 0: the same three-way tie
    np.testing.assert_allclose(link_credits(Zo, np.array([[1.0], [-1.0], [2.0], [4.0]])),
                               [1 / 3, 1 / 3, 1 / 3, 1.0], rtol=1e-15)


def test_many_distinct_points_at_the_same_distance_widen_the_search():
    # record 0 is published at the origin; the originals are the 8 points (+-1, 0), (0, +-1),
    # (+-0.6, +-0.8), all at distance 1 from it (0.6^2 + 0.8^2 = 1, which doubles give as
    # 1.0000000000000002: inside the tie tolerance), and (5, 5) at 7.07. Its own original is
    # (1, 0), so it ties with 8: 1/8. The search asks for 2, then 4, 8 and all 9 neighbours.
    # The other records are published unchanged: each is its own unique nearest -> 1.
    ring = [[1, 0], [-1, 0], [0, 1], [0, -1], [0.6, 0.8], [-0.6, 0.8], [0.6, -0.8], [-0.6, -0.8]]
    Zo = np.array(ring + [[5, 5]], dtype=float)
    Zm = Zo.copy()
    Zm[0] = [0.0, 0.0]
    credit = link_credits(Zo, Zm)
    assert credit[0] == pytest.approx(1 / 8, rel=1e-15)
    np.testing.assert_array_equal(credit[1:], 1.0)
    # at (0.1, 0) it is strictly nearest to (1, 0): distance 0.9 against >= 1 -> 1
    Zm[0] = [0.1, 0.0]
    assert link_credits(Zo, Zm)[0] == 1.0


def test_the_tolerance_absorbs_rounding_not_real_gaps():
    # originals 0.1, 0.5, 0.31; record 1 published at 0.3: by hand its distances are 0.2, 0.2
    # (own) and 0.01 -> the nearest is record 2's original, own not among the nearest -> 0
    Zo = np.array([[0.1], [0.5], [0.31]])
    assert link_credits(Zo, np.array([[0.1], [0.3], [0.31]])).tolist() == [1.0, 0.0, 1.0]
    # published at 0.3 with the third original at 0.9 instead: distances 0.2, 0.2, 0.6; a tie
    # in exact arithmetic, split by one ulp in doubles (0.3 - 0.1 = 0.19999999999999998):
    # with the tolerance it is a tie -> 1/2
    Zo = np.array([[0.1], [0.5], [0.9]])
    assert link_credits(Zo, np.array([[0.1], [0.3], [0.9]])).tolist() == [1.0, 0.5, 1.0]
    # own at 0.5000001: distance 0.2000001 against 0.2 (5e-7 relative): not a tie -> 0
    Zo = np.array([[0.1], [0.5000001], [0.9]])
    assert link_credits(Zo, np.array([[0.1], [0.3], [0.9]])).tolist() == [1.0, 0.0, 1.0]


def metric(original, released, **params):
    ctx = make_context()
    values = Dbrl().compute(original, released, validate_params(Dbrl.params, params), ctx)
    return values, ctx


def test_metric_standardizes_by_the_original_and_names_its_columns():
    # a: 1 2 3 4 10 (mean 4, population sd sqrt((9+4+1+0+36)/5) = sqrt(10)); b = 1000 a: the
    # same z-scores. Everything published at the mean (4, 4000): z = 0 for every record, whose
    # distance to original i is sqrt(2) |z_i|: 3, 2, 1, 0, 6 (times sqrt(2/10)) -> the unique
    # nearest is record 3 (a = 4), which is its own -> credit 1 for record 3 only: dbrl = 1/5
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    table = typed_table({"a": values, "b": [v * 1000 for v in values], "s": list("xyzuv")},
                        quasi={"a": "continuous", "b": "continuous", "s": "nominal"})
    flat = typed_table({"a": [4.0] * 5, "b": [4000.0] * 5, "s": list("xyzuv")},
                       quasi={"a": "continuous", "b": "continuous", "s": "nominal"})
    out, ctx = metric(table, flat)
    assert out == {"dbrl": 0.2, "dbrl.linked": 1.0, "dbrl.unique": 1.0, "dbrl.records": 5.0, "dbrl.columns": 2.0}
    # the nominal column s is not a distance column: the note names the two it used
    assert ctx.notes == ["dbrl links on 2 column(s), euclidean distance: a, b"]
    same, _ = metric(table, table)
    assert same["dbrl"] == 1.0 and same["dbrl.unique"] == 5.0


def test_mahalanobis_is_euclidean_after_whitening_by_the_original_covariance():
    from scipy.spatial.distance import mahalanobis

    rng = np.random.default_rng(3)
    Xo = rng.multivariate_normal([0, 5, -2], [[4, 1.5, 0], [1.5, 1, 0.3], [0, 0.3, 2]], size=60)
    Xm = Xo + rng.normal(scale=0.7, size=Xo.shape)
    Zo, Zm = whiten(Xo, Xm, "mahalanobis")
    VI = np.linalg.inv(np.cov(Xo, rowvar=False, ddof=0))  # population covariance, as documented
    for i, j in [(0, 0), (3, 17), (59, 2)]:
        assert np.linalg.norm(Zm[i] - Zo[j]) == pytest.approx(mahalanobis(Xm[i], Xo[j], VI), rel=1e-10)
    # Euclidean: z-scores by the original's mean and population sd
    Zo, Zm = whiten(Xo, Xm, "euclidean")
    np.testing.assert_allclose(Zm, (Xm - Xo.mean(axis=0)) / Xo.std(axis=0), rtol=1e-14)


# -- independent checks --------------------------------------------------------------------


def brute_force(Zo: np.ndarray, Zm: np.ndarray) -> np.ndarray:
    """The definition over the full distance matrix: credit 1/(number at the smallest distance)
    when the own original is among them."""
    D = np.sqrt(((Zm[:, None, :] - Zo[None, :, :]) ** 2).sum(axis=2))
    nearest = D <= D.min(axis=1, keepdims=True) * (1 + 1e-9) + 1e-12
    return np.diag(nearest) / nearest.sum(axis=1)


@functools.cache
def census() -> np.ndarray:
    t = data.sdcmicro("census")
    return np.column_stack([t.column(c).to_numpy().astype(np.float64) for c in CENSUS_QI])


def census_table(X: np.ndarray):
    return typed_table({c: X[:, j] for j, c in enumerate(CENSUS_QI)}, quasi={c: "continuous" for c in CENSUS_QI})


@pytest.mark.parametrize("distance", ["euclidean", "mahalanobis"])
def test_equals_brute_force_on_a_census_sample(distance):
    from scipy.spatial.distance import cdist

    rng = np.random.default_rng(11)
    X = census()[rng.choice(1080, size=400, replace=False)]
    if distance == "mahalanobis":
        # five columns that are not nearly collinear (Census's earnings columns nearly are)
        X = X[:, [0, 1, 2, 7, 8]]
    Xm = X + rng.normal(size=X.shape) * X.std(axis=0) * 0.3
    names = CENSUS_QI[:X.shape[1]]
    if distance == "euclidean":  # the test's own z-scores: the original's mean and population sd
        mu, sd = X.mean(axis=0), X.std(axis=0)
        D = cdist((Xm - mu) / sd, (X - mu) / sd)
    else:
        D = cdist(Xm, X, "mahalanobis", VI=np.linalg.inv(np.cov(X, rowvar=False, ddof=0)))
    nearest = D <= D.min(axis=1, keepdims=True) * (1 + 1e-9) + 1e-12
    expected = np.diag(nearest) / nearest.sum(axis=1)
    table = typed_table({c: X[:, j] for j, c in enumerate(names)}, quasi={c: "continuous" for c in names})
    released = typed_table({c: Xm[:, j] for j, c in enumerate(names)}, quasi={c: "continuous" for c in names})
    out, _ = metric(table, released, distance=distance)
    assert out["dbrl.linked"] == pytest.approx(expected.sum(), abs=1e-9)
    assert 0.2 < out["dbrl"] < 0.95


def test_equals_brute_force_on_tie_heavy_integer_data():
    # 3 columns of integers 0..3 (64 distinct points for 300 records: many duplicates) and
    # released values moved by -1, 0 or +1: ties everywhere, between duplicates and between
    # distinct points at equal distance
    rng = np.random.default_rng(5)
    Zo = rng.integers(0, 4, size=(300, 3)).astype(float)
    Zm = Zo + rng.integers(-1, 2, size=Zo.shape)
    expected = brute_force(Zo, Zm)
    assert len(set(np.round(expected, 9))) > 5  # really many different tie sizes
    np.testing.assert_allclose(link_credits(Zo, Zm), expected, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_equals_brute_force_on_random_small_grids(n, d, seed):
    # few distinct values per column: duplicates and equidistant points in every shape
    rng = np.random.default_rng(seed)
    Zo = rng.integers(0, 3, size=(n, d)).astype(float)
    Zm = Zo + rng.integers(-1, 2, size=Zo.shape) * rng.choice([0.5, 1.0])
    np.testing.assert_allclose(link_credits(Zo, Zm), brute_force(Zo, Zm), rtol=1e-12)


def test_agrees_with_the_recordlinkage_toolkit():
    rl = pytest.importorskip("recordlinkage")
    import pandas as pd

    rng = np.random.default_rng(2)
    X = census()[rng.choice(1080, size=150, replace=False)]
    Xm = X + rng.normal(size=X.shape) * X.std(axis=0) * 0.1
    mu, sd = X.mean(axis=0), X.std(axis=0)
    cols = [f"c{j}" for j in range(X.shape[1])]
    released = pd.DataFrame((Xm - mu) / sd, columns=cols)
    originals = pd.DataFrame((X - mu) / sd, columns=cols)
    pairs = rl.Index().full().index(released, originals)
    compare = rl.Compare()
    for c in cols:  # gauss similarity 2^(-(d/scale)^2) per column: the log2 of their product is -|d|^2/scale^2
        compare.numeric(c, c, method="gauss", offset=0.0, scale=50.0, label=c)
    features = compare.compute(pairs, released, originals)
    score = np.log2(features).sum(axis=1)
    best = score.groupby(level=0).idxmax()  # each released record's best-matching original
    linked = sum(1 for i, (_, j) in best.items() if i == j)
    out, _ = metric(census_table(X), census_table(Xm))
    assert out["dbrl.unique"] == out["dbrl.linked"]  # no ties in continuous noise
    assert out["dbrl.linked"] == linked


# -- properties on Census ------------------------------------------------------------------


def mdav(X: np.ndarray, k: int):
    table = census_table(X)
    params = validate_params(Mdav.params, {"k": k})
    Mdav().check(params, table=table)
    return table, Mdav().run(table, params, make_context())


def test_census_itself_noise_and_mdav():
    X = census()
    table = census_table(X)
    assert metric(table, table)[0]["dbrl"] == 1.0  # no duplicate records in Census
    rng = np.random.default_rng(0)
    noise = rng.normal(size=X.shape) * X.std(axis=0)
    levels = [0.1, 0.3, 1.0, 3.0]
    risks = [metric(table, census_table(X + level * noise))[0]["dbrl"] for level in levels]
    # the same noise pattern scaled up: monotone, and heavy noise links almost nothing
    assert 1.0 > risks[0] > risks[1] > risks[2] > risks[3]
    assert risks[3] < 0.05
    original, grouped = mdav(X, 3)
    r_mdav = metric(original, grouped)[0]["dbrl"]
    assert risks[3] < r_mdav < 1.0


def test_bad_inputs_give_one_line():
    table = typed_table({"a": [1.0, 2.0, 3.0], "s": ["x", "y", "z"]}, quasi={"a": "continuous", "s": "nominal"})
    with pytest.raises(InputError, match="not numeric") as err:
        metric(table, table, columns=["a", "s"])
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="'b' is not in both tables"):
        metric(table, table, columns=["b"])
    with pytest.raises(Exception, match="distance"):
        validate_params(Dbrl.params, {"distance": "manhattan"})
    holes = typed_table({"a": [1.0, None, 3.0]}, quasi={"a": "continuous"})
    with pytest.raises(InputError, match="missing values"):
        metric(holes, holes)
    other = typed_table({"a": [1.0, 2.0]}, quasi={"a": "continuous"})
    with pytest.raises(InputError, match="different records"):
        metric(table, other, columns=["a"])
    collinear = typed_table({"a": [1.0, 2.0, 3.0], "b": [2.0, 4.0, 6.0]}, quasi={"a": "continuous", "b": "continuous"})
    with pytest.raises(InputError, match="mahalanobis needs .* positive definite"):
        metric(collinear, collinear, distance="mahalanobis")
    # one table (a one-input evaluate step, risk_before): the table against itself
    assert Dbrl().compute(None, table, validate_params(Dbrl.params, {"columns": ["a"]}), make_context())["dbrl"] == 1


# -- through the CLI -----------------------------------------------------------------------


def test_workflow_scores_mdav_census_deterministically(cli, project):
    wf = census_workflow(project, k=3, extra="""
        risks:
          uses: evaluate
          input: [typed, grouped]
          with:
            metrics: [dbrl, {interval-disclosure: {k: 0.5}}]
            risk_before: true
    """)
    runs = []
    for seed in ("7", "7", "8"):
        res = cli("run", wf, "--db", project / f"s{len(runs)}.duckdb", "--out-dir", project / f"out{len(runs)}",
                  "--json", "--seed", seed)
        assert res.exit_code == 0, res.output
        runs.append({k: v for k, v in json.loads(res.output)["metrics"].items() if k.startswith("risks.")})
    m = runs[0]
    assert m["risks.dbrl.before"] == 1.0 and m["risks.interval-disclosure.before"] == 1.0
    assert 0 < m["risks.dbrl"] < 1 and m["risks.dbrl.records"] == 1080
    assert 0 <= m["risks.interval-disclosure"] < 1
    # the figures equal the functions' on the same MDAV output computed here
    original, grouped = mdav(census(), 3)
    assert m["risks.dbrl"] == pytest.approx(metric(original, grouped)[0]["dbrl"], abs=1e-12)
    # the same seed gives the same figures; MDAV and these metrics use no randomness, so another seed too
    assert runs[1] == m and runs[2] == m
